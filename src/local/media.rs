//! Request media decoded for the embedded model's multimodal projector: an image to RGB8
//! pixels, an audio clip to mono `f32` samples at the model's sample rate. Everything here is
//! pure Rust (`image`, `hound`, `symphonia`) and bounded before it allocates: an image's size
//! is read from its header and refused over `AGENT_AS_MODEL_MAX_MEDIA_PIXELS` before a pixel
//! is decoded (the `image` crate's own limits guard the decode besides), a WAV's duration is
//! read from its header and an MP3's counted as it is decoded, which stops as soon as it passes
//! `AGENT_AS_MODEL_MAX_AUDIO_SECONDS`. The format is told from the bytes, not from the media
//! type the request names. llama.cpp's own file decoders are not used: they fall back to
//! running ffmpeg from PATH.
//!
//! Every failure is a [`CallError::at`] the part's path: the caller's bytes are at fault. A
//! decoder that panics on a malformed file (none should) is caught and answered the same way,
//! so that a bad file cannot take down the thread that decodes it.

use crate::error::{CallError, CallResult};
use crate::limits::Limits;
use image::{DynamicImage, ImageDecoder, ImageError, ImageFormat, ImageReader};
use std::io::Cursor;
use std::panic::{AssertUnwindSafe, catch_unwind};
use symphonia::core::audio::{AudioBuffer, AudioBufferRef, Signal};
use symphonia::core::codecs::DecoderOptions;
use symphonia::core::errors::Error as AudioError;
use symphonia::core::formats::FormatOptions;
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

/// An image's pixels: RGB, 8 bits a channel, row by row from the top left; `rgb` holds
/// `width × height × 3` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pixels {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
}

/// Most bytes one pixel takes while decoding: four 16-bit channels (a 16-bit RGBA PNG), the
/// widest these four formats decode to.
const BYTES_PER_PIXEL: u64 = 8;

/// What a decoder may allocate besides the image's own buffer (rows, palettes, a GIF's frame),
/// for the `image` crate's allocation limit.
const DECODER_SLACK: u64 = 64 * 1024 * 1024;

/// Most image and audio parts in one call: refuses `n` over `AGENT_AS_MODEL_MAX_MEDIA_PARTS`,
/// naming `path` (the request's messages or input).
pub fn count_parts(n: usize, path: &str, limits: &Limits) -> CallResult<()> {
    if n > limits.max_media_parts {
        return Err(CallError::at(
            path,
            format!(
                "carries {n} image and audio parts, over the limit of {} \
                 (AGENT_AS_MODEL_MAX_MEDIA_PARTS)",
                limits.max_media_parts
            ),
        ));
    }
    Ok(())
}

/// An image's pixels, from a PNG, JPEG, GIF (its first frame) or WebP told from its bytes.
/// Any colour type becomes RGB8 (alpha is dropped, as llama.cpp's own loader drops it) and an
/// EXIF orientation is applied. `part` names the field in errors.
pub fn image(bytes: &[u8], part: &str, limits: &Limits) -> CallResult<Pixels> {
    let Some(format) = image_format(bytes) else {
        return Err(CallError::at(
            part,
            "is not a PNG, JPEG, GIF or WebP image: its first bytes are none of theirs \
             (whatever its media type says)",
        ));
    };
    guarded(part, || decode_image(bytes, format, part, limits))
}

/// The format an image's first bytes (its signature) name.
fn image_format(bytes: &[u8]) -> Option<ImageFormat> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(ImageFormat::Png)
    } else if bytes.starts_with(b"\xff\xd8\xff") {
        Some(ImageFormat::Jpeg)
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some(ImageFormat::Gif)
    } else if bytes.starts_with(b"RIFF") && bytes.get(8..12) == Some(b"WEBP".as_slice()) {
        Some(ImageFormat::WebP)
    } else {
        None
    }
}

fn decode_image(
    bytes: &[u8],
    format: ImageFormat,
    part: &str,
    limits: &Limits,
) -> CallResult<Pixels> {
    let pixels = u64::try_from(limits.max_media_pixels).unwrap_or(u64::MAX);
    let alloc = pixels
        .saturating_mul(BYTES_PER_PIXEL)
        .saturating_add(DECODER_SLACK);
    // The header only: making the decoder reads no pixel. Only the allocation is bounded here
    // (PNG's decoder takes its limits when it is made), so that the size is refused below in
    // this module's words, naming the setting.
    let mut guard = image::Limits::default();
    guard.max_alloc = Some(alloc);
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    reader.limits(guard.clone());
    let mut decoder = reader
        .into_decoder()
        .map_err(|e| image_error(part, e, limits))?;
    let (width, height) = decoder.dimensions();
    if u64::from(width) * u64::from(height) > pixels {
        return Err(CallError::at(
            part,
            format!(
                "is an image of {width}×{height} pixels, over the limit of {} pixels \
                 (AGENT_AS_MODEL_MAX_MEDIA_PIXELS)",
                limits.max_media_pixels
            ),
        ));
    }
    // The second guard, should a decoder find more than its header said: no side over the
    // pixel limit, and no more allocated than the limit's pixels at their widest.
    let side = u32::try_from(pixels).unwrap_or(u32::MAX);
    guard.max_image_width = Some(side);
    guard.max_image_height = Some(side);
    guard
        .reserve(decoder.total_bytes())
        .map_err(|e| image_error(part, e, limits))?;
    decoder
        .set_limits(guard)
        .map_err(|e| image_error(part, e, limits))?;
    let orientation = decoder
        .orientation()
        .map_err(|e| image_error(part, e, limits))?;
    let mut decoded =
        DynamicImage::from_decoder(decoder).map_err(|e| image_error(part, e, limits))?;
    decoded.apply_orientation(orientation);
    let rgb = decoded.into_rgb8();
    Ok(Pixels {
        width: rgb.width(),
        height: rgb.height(),
        rgb: rgb.into_raw(),
    })
}

/// An `image` error as the caller's: its limits name the pixel setting.
fn image_error(part: &str, e: ImageError, limits: &Limits) -> CallError {
    match e {
        ImageError::Limits(e) => CallError::at(
            part,
            format!(
                "could not be decoded within the limit of {} pixels \
                 (AGENT_AS_MODEL_MAX_MEDIA_PIXELS): {e}",
                limits.max_media_pixels
            ),
        ),
        // Some decoders end their words with a line break.
        e => CallError::at(
            part,
            format!("could not be decoded: {}", e.to_string().trim_end()),
        ),
    }
}

/// `decode`, with a panic in a decoder answered as an undecodable part.
fn guarded<T>(part: &str, decode: impl FnOnce() -> CallResult<T>) -> CallResult<T> {
    catch_unwind(AssertUnwindSafe(decode)).unwrap_or_else(|_| {
        Err(CallError::at(
            part,
            "could not be decoded: the decoder failed on it (a malformed file)",
        ))
    })
}

/// An audio clip's samples: a WAV (integer PCM of 8, 16, 24 or 32 bits, or 32-bit float) or
/// an MP3, told from its bytes, as mono (the channels averaged) `f32` in [-1, 1] at `rate` Hz
/// (the model's), resampled by linear interpolation. `part` names the field in errors.
pub fn audio(bytes: &[u8], rate: u32, part: &str, limits: &Limits) -> CallResult<Vec<f32>> {
    if rate == 0 {
        return Err(CallError::backend(
            crate::error::Backend::Local,
            "the model's audio sample rate is 0",
        ));
    }
    let (mono, from) = if crate::wire::media::is_wav(bytes) {
        guarded(part, || wav(bytes, part, limits))?
    } else if is_mp3(bytes) {
        guarded(part, || mp3(bytes, part, limits))?
    } else {
        return Err(CallError::at(
            part,
            "is not a WAV or MP3 audio file: its first bytes are neither's \
             (whatever its media type says)",
        ));
    };
    if mono.is_empty() {
        return Err(CallError::at(part, "holds no audio samples"));
    }
    Ok(resample(mono, from, rate))
}

/// An ID3v2 tag, or an MPEG audio frame's sync (11 bits set) with a layer (not ADTS's 00).
fn is_mp3(bytes: &[u8]) -> bool {
    match bytes {
        [b'I', b'D', b'3', ..] => true,
        [0xff, second, ..] => second & 0xe0 == 0xe0 && second & 0x06 != 0,
        _ => false,
    }
}

/// The refusal of a clip over the duration limit.
fn too_long(part: &str, seconds: u64, limits: &Limits) -> CallError {
    CallError::at(
        part,
        format!(
            "is audio of {seconds} seconds or more, over the limit of {} seconds \
             (AGENT_AS_MODEL_MAX_AUDIO_SECONDS)",
            limits.max_audio_seconds
        ),
    )
}

/// Most frames (samples of each channel) allowed at `rate` Hz.
fn max_frames(rate: u32, limits: &Limits) -> u64 {
    u64::try_from(limits.max_audio_seconds)
        .unwrap_or(u64::MAX)
        .saturating_mul(u64::from(rate))
}

/// A WAV's samples, mixed to mono, and its sample rate; its duration is read from its header
/// and refused over the limit before a sample is read.
fn wav(bytes: &[u8], part: &str, limits: &Limits) -> CallResult<(Vec<f32>, u32)> {
    let undecodable =
        |e: hound::Error| CallError::at(part, format!("could not be decoded as WAV: {e}"));
    let mut reader = hound::WavReader::new(Cursor::new(bytes)).map_err(undecodable)?;
    let spec = reader.spec();
    if spec.sample_rate == 0 {
        return Err(CallError::at(
            part,
            "could not be decoded as WAV: its sample rate is 0",
        ));
    }
    let frames = u64::from(reader.duration());
    if frames > max_frames(spec.sample_rate, limits) {
        return Err(too_long(part, frames / u64::from(spec.sample_rate), limits));
    }
    // A header may claim more than the bytes hold: reserve no more than they could.
    let capacity = usize::try_from(frames)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    let mut mono = Mono::new(usize::from(spec.channels), capacity);
    match spec.sample_format {
        hound::SampleFormat::Float => {
            for sample in reader.samples::<f32>() {
                mono.push(sample.map_err(undecodable)?);
            }
        }
        hound::SampleFormat::Int => {
            let scale = 1.0 / f64::from(1u32 << (spec.bits_per_sample.clamp(1, 32) - 1));
            for sample in reader.samples::<i32>() {
                mono.push((f64::from(sample.map_err(undecodable)?) * scale) as f32);
            }
        }
    }
    Ok((mono.samples, spec.sample_rate))
}

/// Interleaved samples mixed down to one channel, frame by frame.
struct Mono {
    channels: usize,
    sum: f32,
    seen: usize,
    samples: Vec<f32>,
}

impl Mono {
    fn new(channels: usize, capacity: usize) -> Self {
        Mono {
            channels: channels.max(1),
            sum: 0.0,
            seen: 0,
            samples: Vec::with_capacity(capacity),
        }
    }

    /// One sample of the next channel; a frame's mean is kept when its last channel comes.
    fn push(&mut self, sample: f32) {
        self.sum += clean(sample);
        self.seen += 1;
        if self.seen == self.channels {
            self.samples.push(self.sum / self.channels as f32);
            self.sum = 0.0;
            self.seen = 0;
        }
    }
}

/// A sample within [-1, 1] (a float WAV may go past it; NaN and infinities become silence).
fn clean(sample: f32) -> f32 {
    if sample.is_finite() {
        sample.clamp(-1.0, 1.0)
    } else {
        0.0
    }
}

/// An MP3's samples, mixed to mono, and its sample rate; the decode stops, refusing the clip,
/// as soon as it passes the duration limit. A damaged frame is skipped, as players skip it.
fn mp3(bytes: &[u8], part: &str, limits: &Limits) -> CallResult<(Vec<f32>, u32)> {
    let undecodable =
        |e: AudioError| CallError::at(part, format!("could not be decoded as MP3: {e}"));
    let source = MediaSourceStream::new(Box::new(Cursor::new(bytes.to_vec())), Default::default());
    let probed = symphonia::default::get_probe()
        .format(
            &Hint::new(),
            source,
            &FormatOptions::default(),
            &MetadataOptions::default(),
        )
        .map_err(undecodable)?;
    let mut format = probed.format;
    let Some(track) = format.default_track() else {
        return Err(CallError::at(
            part,
            "could not be decoded as MP3: no audio track",
        ));
    };
    let track_id = track.id;
    let mut decoder = symphonia::default::get_codecs()
        .make(&track.codec_params, &DecoderOptions::default())
        .map_err(undecodable)?;
    let (mut mono, mut rate) = (Vec::new(), None);
    loop {
        let packet = match format.next_packet() {
            Ok(packet) => packet,
            Err(AudioError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(undecodable(e)),
        };
        if packet.track_id() != track_id {
            continue;
        }
        let decoded = match decoder.decode(&packet) {
            Ok(decoded) => decoded,
            Err(AudioError::DecodeError(_)) => continue,
            Err(e) => return Err(undecodable(e)),
        };
        let this = decoded.spec().rate;
        if *rate.get_or_insert(this) != this {
            return Err(CallError::at(
                part,
                "could not be decoded as MP3: its sample rate changes within the file",
            ));
        }
        mix(decoded, &mut mono);
        let frames = u64::try_from(mono.len()).unwrap_or(u64::MAX);
        if frames > max_frames(this, limits) {
            return Err(too_long(part, frames / u64::from(this.max(1)), limits));
        }
    }
    Ok((mono, rate.unwrap_or(1)))
}

/// A decoded packet's frames, each the mean of its channels, appended to `mono`.
fn mix(decoded: AudioBufferRef<'_>, mono: &mut Vec<f32>) {
    let converted;
    let buffer: &AudioBuffer<f32> = match decoded {
        AudioBufferRef::F32(ref buffer) => buffer,
        other => {
            let mut into = other.make_equivalent::<f32>();
            other.convert(&mut into);
            converted = into;
            &converted
        }
    };
    let planes = buffer.planes();
    let planes = planes.planes();
    let channels = planes.len().max(1) as f32;
    mono.reserve(buffer.frames());
    for i in 0..buffer.frames() {
        let sum: f32 = planes
            .iter()
            .map(|plane| clean(plane.get(i).copied().unwrap_or(0.0)))
            .sum();
        mono.push(sum / channels);
    }
}

/// `input` at `from` Hz resampled to `to` Hz by linear interpolation (no low-pass filter:
/// content above half of `to` folds back, faintly).
fn resample(input: Vec<f32>, from: u32, to: u32) -> Vec<f32> {
    if from == to || from == 0 || input.is_empty() {
        return input;
    }
    let (from, to) = (u64::from(from), u64::from(to));
    let n = u64::try_from(input.len()).unwrap_or(u64::MAX);
    let out = (n.saturating_mul(to) + from / 2) / from;
    let step = from as f64 / to as f64;
    (0..out)
        .map(|i| {
            let position = i as f64 * step;
            let at = position as usize;
            let fraction = (position - at as f64) as f32;
            let a = input.get(at).or(input.last()).copied().unwrap_or(0.0);
            let b = input.get(at + 1).copied().unwrap_or(a);
            a + (b - a) * fraction
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{GrayImage, ImageBuffer, Luma, LumaA, Rgb, RgbImage, Rgba, RgbaImage};
    use std::time::{Duration, Instant};

    const MP3: &[u8] = include_bytes!("../../tests/data/media/tone-440hz-1s.mp3");

    fn encode(image: impl Into<DynamicImage>, format: ImageFormat) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        image.into().write_to(&mut out, format).unwrap();
        out.into_inner()
    }

    fn red() -> RgbImage {
        RgbImage::from_pixel(8, 8, Rgb([255, 0, 0]))
    }

    fn decoded(bytes: &[u8]) -> Pixels {
        image(bytes, "messages[0].content[1]", &Limits::default()).unwrap()
    }

    fn refused<T: std::fmt::Debug>(result: CallResult<T>) -> String {
        result.unwrap_err().to_string()
    }

    /// Every pixel of `pixels` is within `tolerance` of `rgb`.
    fn all_near(pixels: &Pixels, rgb: [u8; 3], tolerance: u8) -> bool {
        pixels
            .rgb
            .chunks(3)
            .all(|p| p.iter().zip(rgb).all(|(&a, b)| a.abs_diff(b) <= tolerance))
    }

    #[test]
    fn a_red_png_decodes_to_red_rgb_pixels() {
        let pixels = decoded(&encode(red(), ImageFormat::Png));
        assert_eq!((pixels.width, pixels.height), (8, 8));
        assert_eq!(pixels.rgb.len(), 8 * 8 * 3);
        assert!(pixels.rgb.chunks(3).all(|p| p == [255, 0, 0]));
    }

    #[test]
    fn grey_alpha_16_bit_and_palette_pngs_become_rgb8() {
        // RGBA: the alpha is dropped, as llama.cpp's own loader drops it.
        let rgba = RgbaImage::from_pixel(3, 2, Rgba([0, 200, 10, 40]));
        let pixels = decoded(&encode(rgba, ImageFormat::Png));
        assert_eq!((pixels.width, pixels.height, pixels.rgb.len()), (3, 2, 18));
        assert!(all_near(&pixels, [0, 200, 10], 0));
        let grey = GrayImage::from_pixel(4, 4, Luma([100]));
        assert!(all_near(
            &decoded(&encode(grey, ImageFormat::Png)),
            [100; 3],
            0
        ));
        let grey_alpha: ImageBuffer<LumaA<u16>, Vec<u16>> =
            ImageBuffer::from_pixel(2, 2, LumaA([0xffff, 0x1234]));
        let pixels = decoded(&encode(
            DynamicImage::ImageLumaA16(grey_alpha),
            ImageFormat::Png,
        ));
        assert!(all_near(&pixels, [255; 3], 0));
        let deep: ImageBuffer<Rgb<u16>, Vec<u16>> =
            ImageBuffer::from_pixel(2, 2, Rgb([0xffff, 0, 0x8080]));
        let pixels = decoded(&encode(DynamicImage::ImageRgb16(deep), ImageFormat::Png));
        assert!(all_near(&pixels, [255, 0, 128], 0));
        // A palette PNG: two entries, red and blue.
        let mut palette = Vec::new();
        {
            let mut encoder = png::Encoder::new(&mut palette, 2, 1);
            encoder.set_color(png::ColorType::Indexed);
            encoder.set_depth(png::BitDepth::Eight);
            encoder.set_palette(vec![255, 0, 0, 0, 0, 255]);
            let mut writer = encoder.write_header().unwrap();
            writer.write_image_data(&[0, 1]).unwrap();
        }
        let pixels = decoded(&palette);
        assert_eq!(pixels.rgb, [255, 0, 0, 0, 0, 255]);
    }

    #[test]
    fn jpeg_gif_and_webp_decode() {
        let jpeg = decoded(&encode(red(), ImageFormat::Jpeg));
        assert_eq!((jpeg.width, jpeg.height), (8, 8));
        assert!(all_near(&jpeg, [255, 0, 0], 12), "{:?}", &jpeg.rgb[..3]);
        let gif = decoded(&encode(red(), ImageFormat::Gif));
        assert_eq!((gif.width, gif.height), (8, 8));
        assert!(all_near(&gif, [255, 0, 0], 0), "{:?}", &gif.rgb[..3]);
        // The `image` crate writes lossless WebP.
        let mut two = RgbImage::from_pixel(5, 3, Rgb([10, 20, 30]));
        two.put_pixel(4, 2, Rgb([250, 251, 252]));
        let webp = decoded(&encode(two, ImageFormat::WebP));
        assert_eq!((webp.width, webp.height), (5, 3));
        assert_eq!(webp.rgb[..3], [10, 20, 30]);
        assert_eq!(webp.rgb[webp.rgb.len() - 3..], [250, 251, 252]);
    }

    #[test]
    fn an_animated_gif_gives_its_first_frame() {
        use image::codecs::gif::GifEncoder;
        use image::{Delay, Frame};
        let mut bytes = Vec::new();
        {
            let mut encoder = GifEncoder::new(&mut bytes);
            for colour in [[0, 0, 255, 255], [0, 255, 0, 255]] {
                let frame = RgbaImage::from_pixel(4, 4, Rgba(colour));
                let delay = Delay::from_numer_denom_ms(100, 1);
                encoder
                    .encode_frame(Frame::from_parts(frame, 0, 0, delay))
                    .unwrap();
            }
        }
        assert!(all_near(&decoded(&bytes), [0, 0, 255], 0));
    }

    /// The CRC of a PNG chunk (ISO 3309, as zlib's `crc32`).
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &byte in bytes {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    0xedb8_8320 ^ (crc >> 1)
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    fn chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
        let mut typed = kind.to_vec();
        typed.extend_from_slice(data);
        let mut out = u32::try_from(data.len()).unwrap().to_be_bytes().to_vec();
        out.extend_from_slice(&typed);
        out.extend_from_slice(&crc32(&typed).to_be_bytes());
        out
    }

    /// A PNG whose header says `width`×`height` RGB, with a token IDAT.
    fn png_claiming(width: u32, height: u32) -> Vec<u8> {
        let mut header = width.to_be_bytes().to_vec();
        header.extend_from_slice(&height.to_be_bytes());
        header.extend_from_slice(&[8, 2, 0, 0, 0]);
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        png.extend(chunk(b"IHDR", &header));
        png.extend(chunk(
            b"IDAT",
            &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
        ));
        png.extend(chunk(b"IEND", &[]));
        png
    }

    #[test]
    fn a_decompression_bomb_is_refused_from_its_header() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        let started = Instant::now();
        let e = refused(image(
            &png_claiming(100_000, 100_000),
            "input[2].image_url",
            &Limits::default(),
        ));
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(e.contains("`input[2].image_url`"), "{e}");
        assert!(e.contains("100000×100000 pixels"), "{e}");
        assert!(
            e.contains("16777216 pixels (AGENT_AS_MODEL_MAX_MEDIA_PIXELS)"),
            "{e}"
        );
        // A GIF's logical screen of 65535×65535 (a 1×1 frame inside it).
        let mut gif = b"GIF89a\xff\xff\xff\xff\x80\x00\x00\xff\xff\xff\x00\x00\x00".to_vec();
        gif.extend_from_slice(b"\x2c\0\0\0\0\x01\0\x01\0\0\x02\x02\x44\x01\0\x3b");
        let e = refused(image(&gif, "p", &Limits::default()));
        assert!(e.contains("65535×65535 pixels"), "{e}");
        // The limit is width × height, inclusive.
        let png = encode(red(), ImageFormat::Png);
        let at = |max_media_pixels| Limits {
            max_media_pixels,
            ..Limits::default()
        };
        assert_eq!(image(&png, "p", &at(64)).unwrap().rgb.len(), 192);
        let e = refused(image(&png, "p", &at(63)));
        assert!(e.contains("8×8 pixels, over the limit of 63 pixels"), "{e}");
    }

    #[test]
    fn the_image_crates_own_limits_guard_the_decode() {
        let mut guard = image::Limits::default();
        guard.max_image_width = Some(4);
        let mut reader = ImageReader::with_format(
            Cursor::new(encode(red(), ImageFormat::Png)),
            ImageFormat::Png,
        );
        reader.limits(guard);
        let e = image_error("p", reader.decode().unwrap_err(), &Limits::default());
        let e = e.to_string();
        assert!(e.contains("within the limit of 16777216 pixels"), "{e}");
    }

    #[test]
    fn a_truncated_or_corrupt_image_is_an_error_naming_the_part() {
        let noise = RgbImage::from_fn(64, 64, |x, y| {
            let v = x.wrapping_mul(2_654_435_761) ^ y.wrapping_mul(40_503).rotate_left(13);
            Rgb([v as u8, (v >> 8) as u8, (v >> 16) as u8])
        });
        let png = encode(noise, ImageFormat::Png);
        let e = refused(image(
            &png[..png.len() / 2],
            "messages[3].content[0]",
            &Limits::default(),
        ));
        assert!(
            e.contains("`messages[3].content[0]`: could not be decoded"),
            "{e}"
        );
        let jpeg = encode(red(), ImageFormat::Jpeg);
        let e = refused(image(&jpeg[..20], "p", &Limits::default()));
        assert!(e.contains("could not be decoded"), "{e}");
        let e = refused(image(b"GIF89a", "p", &Limits::default()));
        assert!(e.contains("could not be decoded"), "{e}");
    }

    #[test]
    fn what_is_not_an_image_is_refused_as_such() {
        let wav = wav_of(spec(1, 8000, 16, hound::SampleFormat::Int), 80, |_, _| 0.0);
        for bytes in [&wav[..], b"hello, world", b"", b"RIFF\0\0\0\0WAVEfmt "] {
            let e = refused(image(bytes, "p", &Limits::default()));
            assert!(e.contains("is not a PNG, JPEG, GIF or WebP image"), "{e}");
        }
    }

    #[test]
    fn media_parts_are_counted_against_their_limit() {
        let limits = Limits::default();
        assert!(count_parts(32, "messages", &limits).is_ok());
        let e = refused(count_parts(33, "messages", &limits));
        assert!(
            e.contains("`messages`: carries 33 image and audio parts"),
            "{e}"
        );
        assert!(
            e.contains("limit of 32 (AGENT_AS_MODEL_MAX_MEDIA_PARTS)"),
            "{e}"
        );
    }

    fn spec(channels: u16, rate: u32, bits: u16, format: hound::SampleFormat) -> hound::WavSpec {
        hound::WavSpec {
            channels,
            sample_rate: rate,
            bits_per_sample: bits,
            sample_format: format,
        }
    }

    /// A WAV of `frames` frames, `sample(frame, channel)` in [-1, 1].
    fn wav_of(spec: hound::WavSpec, frames: usize, sample: impl Fn(usize, u16) -> f64) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        let mut writer = hound::WavWriter::new(&mut out, spec).unwrap();
        let full = f64::from(1u32 << (spec.bits_per_sample - 1));
        for i in 0..frames {
            for c in 0..spec.channels {
                let v = sample(i, c);
                match spec.sample_format {
                    hound::SampleFormat::Float => writer.write_sample(v as f32).unwrap(),
                    hound::SampleFormat::Int => {
                        let n = (v * full).round().clamp(-full, full - 1.0) as i32;
                        writer.write_sample(n).unwrap();
                    }
                }
            }
        }
        writer.finalize().unwrap();
        out.into_inner()
    }

    fn sine(hz: f64, rate: u32, i: usize) -> f64 {
        (2.0 * std::f64::consts::PI * hz * i as f64 / f64::from(rate)).sin()
    }

    fn peak(samples: &[f32]) -> f32 {
        samples.iter().fold(0.0, |m, s| m.max(s.abs()))
    }

    /// Sign changes per second, over `samples` at `rate` Hz: twice a tone's frequency.
    fn crossings_per_second(samples: &[f32], rate: u32) -> f64 {
        let changes = samples
            .windows(2)
            .filter(|w| (w[0] < 0.0) != (w[1] < 0.0))
            .count();
        changes as f64 * f64::from(rate) / samples.len() as f64
    }

    #[test]
    fn a_stereo_44_1_khz_wav_becomes_16_khz_mono() {
        // 440 Hz, louder on the left (0.6) than on the right (0.2): the mean is 0.4.
        let bytes = wav_of(
            spec(2, 44_100, 16, hound::SampleFormat::Int),
            44_100,
            |i, c| sine(440.0, 44_100, i) * if c == 0 { 0.6 } else { 0.2 },
        );
        let samples = audio(&bytes, 16_000, "p", &Limits::default()).unwrap();
        assert!(samples.len().abs_diff(16_000) <= 1, "{}", samples.len());
        let p = peak(&samples);
        assert!((0.39..=0.401).contains(&p), "{p}");
        let crossings = crossings_per_second(&samples, 16_000);
        assert!((870.0..=890.0).contains(&crossings), "{crossings}");
        // A constant per channel: the mean of the channels, exactly where nothing moves.
        let bytes = wav_of(
            spec(2, 44_100, 16, hound::SampleFormat::Int),
            4410,
            |_, c| if c == 0 { 0.5 } else { -0.25 },
        );
        let samples = audio(&bytes, 16_000, "p", &Limits::default()).unwrap();
        assert_eq!(samples.len(), 1600);
        assert!(
            samples.iter().all(|&s| (s - 0.125).abs() < 1e-4),
            "{:?}",
            &samples[..4]
        );
    }

    #[test]
    fn every_pcm_depth_and_float_and_many_channels_decode() {
        use hound::SampleFormat::{Float, Int};
        for (bits, format) in [(8, Int), (16, Int), (24, Int), (32, Int), (32, Float)] {
            // Three channels: 0.5, -0.5 and 0.3 average to 0.1.
            let bytes = wav_of(spec(3, 16_000, bits, format), 160, |_, c| {
                [0.5, -0.5, 0.3][usize::from(c)]
            });
            let samples = audio(&bytes, 16_000, "p", &Limits::default()).unwrap();
            assert_eq!(samples.len(), 160, "{bits} {format:?}");
            let tolerance = if bits == 8 { 0.01 } else { 1e-4 };
            assert!(
                samples.iter().all(|&s| (s - 0.1).abs() < tolerance),
                "{bits} {format:?}: {:?}",
                &samples[..3]
            );
        }
        // Full scale either way stays within [-1, 1]; a float past it is clamped.
        let bytes = wav_of(
            spec(1, 8000, 16, Int),
            2,
            |i, _| if i == 0 { -1.0 } else { 1.0 },
        );
        assert_eq!(
            audio(&bytes, 8000, "p", &Limits::default()).unwrap()[0],
            -1.0
        );
        let bytes = wav_of(spec(1, 8000, 32, Float), 2, |i, _| [3.0, f64::NAN][i]);
        assert_eq!(
            audio(&bytes, 8000, "p", &Limits::default()).unwrap(),
            [1.0, 0.0]
        );
    }

    #[test]
    fn a_wav_longer_than_the_limit_is_refused_from_its_header() {
        // A tenth of a second whose header claims 700 s: refused before a sample is read.
        let mut bytes = wav_of(spec(1, 8000, 16, hound::SampleFormat::Int), 800, |_, _| 0.0);
        let data = bytes.windows(4).position(|w| w == b"data").unwrap();
        bytes[data + 4..data + 8].copy_from_slice(&(8000u32 * 2 * 700).to_le_bytes());
        let e = refused(audio(
            &bytes,
            16_000,
            "messages[1].content[0]",
            &Limits::default(),
        ));
        assert!(
            e.contains("`messages[1].content[0]`: is audio of 700 seconds"),
            "{e}"
        );
        assert!(
            e.contains("limit of 600 seconds (AGENT_AS_MODEL_MAX_AUDIO_SECONDS)"),
            "{e}"
        );
        // A real two seconds against a one-second limit.
        let short = Limits {
            max_audio_seconds: 1,
            ..Limits::default()
        };
        let bytes = wav_of(
            spec(1, 8000, 16, hound::SampleFormat::Int),
            16_000,
            |_, _| 0.0,
        );
        assert!(refused(audio(&bytes, 16_000, "p", &short)).contains("is audio of 2 seconds"));
        let bytes = wav_of(spec(1, 8000, 16, hound::SampleFormat::Int), 8000, |_, _| {
            0.0
        });
        assert_eq!(audio(&bytes, 16_000, "p", &short).unwrap().len(), 16_000);
        // A header cut short is an error naming the part.
        let bytes = wav_of(spec(1, 8000, 16, hound::SampleFormat::Int), 80, |_, _| 0.0);
        let e = refused(audio(&bytes[..30], 16_000, "p", &Limits::default()));
        assert!(e.contains("`p`: could not be decoded"), "{e}");
    }

    /// The MP3 without its ID3v2 tag: it starts with a frame's sync.
    fn untagged() -> &'static [u8] {
        let size = MP3[6..10]
            .iter()
            .fold(0usize, |n, &b| (n << 7) | usize::from(b & 0x7f));
        &MP3[10 + size..]
    }

    #[test]
    fn an_mp3_decodes_to_its_tone() {
        for bytes in [MP3, untagged()] {
            assert_eq!(bytes[0] == 0xff, bytes.as_ptr() != MP3.as_ptr());
            let samples = audio(bytes, 16_000, "p", &Limits::default()).unwrap();
            // One second, and the encoder's delay and padding (under two frames of 1152).
            assert!(
                (16_000..=17_700).contains(&samples.len()),
                "{}",
                samples.len()
            );
            let middle = &samples[4000..12_000];
            let p = peak(middle);
            assert!((0.45..=0.56).contains(&p), "{p}");
            let crossings = crossings_per_second(middle, 16_000);
            assert!((860.0..=900.0).contains(&crossings), "{crossings}");
        }
    }

    #[test]
    fn an_mp3_past_the_limit_is_refused_while_it_decodes() {
        let three: Vec<u8> = untagged().repeat(3);
        let long = Limits {
            max_audio_seconds: 5,
            ..Limits::default()
        };
        let samples = audio(&three, 16_000, "p", &long).unwrap();
        assert!(samples.len() > 3 * 16_000, "{}", samples.len());
        let short = Limits {
            max_audio_seconds: 2,
            ..Limits::default()
        };
        let e = refused(audio(&three, 16_000, "messages[0].content[2]", &short));
        assert!(
            e.contains("`messages[0].content[2]`: is audio of 2 seconds"),
            "{e}"
        );
        assert!(
            e.contains("limit of 2 seconds (AGENT_AS_MODEL_MAX_AUDIO_SECONDS)"),
            "{e}"
        );
    }

    #[test]
    fn what_is_not_audio_is_refused_as_such() {
        let png = encode(red(), ImageFormat::Png);
        for bytes in [&png[..], b"hello", b"", b"RIFF\0\0\0\0WEBPVP8L"] {
            let e = refused(audio(bytes, 16_000, "p", &Limits::default()));
            assert!(e.contains("`p`: is not a WAV or MP3 audio file"), "{e}");
        }
        // An ID3 tag with nothing after it, and frame syncs over noise, hold no audio.
        for bytes in [&MP3[..117], &[0xff, 0xfb, 0, 1, 2, 3, 4, 5, 6, 7][..]] {
            let e = refused(audio(bytes, 16_000, "p", &Limits::default()));
            assert!(
                e.contains("could not be decoded") || e.contains("holds no audio samples"),
                "{e}"
            );
        }
        assert!(audio(MP3, 0, "p", &Limits::default()).is_err());
    }

    #[test]
    fn resampling_interpolates_linearly() {
        assert_eq!(resample(vec![0.0, 1.0], 1, 2), [0.0, 0.5, 1.0, 1.0]);
        assert_eq!(resample(vec![0.0, 1.0, 2.0, 3.0], 2, 1), [0.0, 2.0]);
        assert_eq!(resample(vec![0.25; 3], 7, 7), [0.25; 3]);
        assert_eq!(resample(vec![0.5; 441], 44_100, 16_000).len(), 160);
        assert!(resample(Vec::new(), 1, 2).is_empty());
    }
}
