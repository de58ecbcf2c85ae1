//! OpenAI's audio transcriptions (`POST /v1/audio/transcriptions`) without the HTTP: the parts of
//! the multipart form read into what is asked ([`Asked`]: `file`, `model`, `language`, `prompt`,
//! `response_format`, `temperature`), the audio checked (WAV or MP3, told apart by its bytes) and
//! made a [`Block::Audio`], and the call made a chat completion of the model `model` routes to:
//! one user turn holding an instruction ("Transcribe this audio verbatim…", with the language and
//! the prompt) and the audio. The answer's text, trimmed, is the transcription, written as
//! `response_format` asks ([`object`]).
//!
//! What no model here can say is not made up: `verbose_json` has the audio's `duration` (from the
//! WAV header or the MP3 frames) and the `language` asked for, but no `segments` or `words`
//! (their timestamps, log-probabilities and token ids are not known), and `srt` and `vtt`, which
//! need timestamps, are refused by name.

use super::{Api, ApiError};
use crate::call::{Block, Call, Finish, Role};
use crate::contract::cursor::Entry;
use crate::error::{CallError, clip};
use crate::limits::Limits;
use crate::wire::media;
use bytes::Bytes;
use serde_json::{Map, Value, json};

/// The parts one form may have; past them the request is refused (OpenAI's SDK sends at most
/// a dozen).
pub const MAX_PARTS: usize = 256;

/// Fields named in the warnings at most (each distinct name once).
const MAX_WARNED: usize = 16;

/// The `response_format`s written here.
pub const FORMATS: [&str; 3] = ["json", "text", "verbose_json"];

/// One part of the form, as it came.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    /// The field's name (`None`: a part without one).
    pub name: Option<String>,
    pub file_name: Option<String>,
    pub content_type: Option<String>,
    pub data: Bytes,
}

impl Part {
    /// A text field.
    pub fn text(name: &str, value: &str) -> Part {
        Part {
            name: Some(name.to_owned()),
            file_name: None,
            content_type: None,
            data: Bytes::copy_from_slice(value.as_bytes()),
        }
    }
}

/// How the transcription is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `{"text": …}`.
    Json,
    /// The text alone, as `text/plain`.
    Text,
    /// `{"task": "transcribe", "language", "duration", "text"}`.
    VerboseJson,
}

/// The audio to transcribe: its bytes and their MIME type (one of [`media::AUDIO_TYPES`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Audio {
    pub data: Bytes,
    pub mime: &'static str,
}

/// A transcription request, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Asked {
    pub model: String,
    pub audio: Audio,
    /// ISO-639-1 (or -3) code, lowercase.
    pub language: Option<String>,
    /// Context text: what came before the audio, or the spellings of its names and terms.
    pub prompt: Option<String>,
    pub format: Format,
    pub temperature: Option<f64>,
    /// Fields taken and not honoured, and unknown ones, for the warnings header.
    pub warnings: Vec<String>,
}

/// Fields of OpenAI's request that are taken and have no effect here, with why (an array
/// field comes as `name[]`).
const IGNORED: [(&str, &str); 7] = [
    (
        "timestamp_granularities",
        "no timestamps are made here (verbose_json has no segments or words)",
    ),
    (
        "include",
        "the transcription's log-probabilities are not returned here",
    ),
    ("chunking_strategy", "the audio is transcribed whole"),
    ("keywords", "it has no equivalent here"),
    ("languages", "it has no equivalent here; `language` is read"),
    ("known_speaker_names", "speakers are not told apart here"),
    (
        "known_speaker_references",
        "speakers are not told apart here",
    ),
];

/// The text fields read, each at most once.
const TEXT_FIELDS: [&str; 6] = [
    "model",
    "language",
    "prompt",
    "response_format",
    "temperature",
    "stream",
];

/// An error naming the field `param`.
fn at(param: &str, problem: impl std::fmt::Display) -> ApiError {
    CallError::at(param, problem).into()
}

/// Reads the form's parts: a 400 naming the field for a missing `file` or `model`, a file that
/// is not WAV or MP3 audio, a `response_format` not written here, `stream: true`, a bad
/// `temperature` or `language`, or a field given twice. Unknown fields are ignored, said in
/// the warnings, as the other APIs here say them.
pub fn read(parts: Vec<Part>) -> Result<Asked, ApiError> {
    let Form {
        file,
        texts,
        warnings,
    } = sort(parts)?;
    let text = |name: &str| {
        texts
            .get(name)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|t| !t.is_empty())
    };
    let Some(file) = file else {
        return Err(at(
            "file",
            "is required: the audio to transcribe, a WAV or MP3 file",
        ));
    };
    let Some(model) = text("model") else {
        return Err(at(
            "model",
            "is required: the model to transcribe with (one that takes audio input)",
        ));
    };
    not_streamed(text("stream"))?;
    let format = format(text("response_format"))?;
    let temperature = temperature(text("temperature"))?;
    let language = language(text("language"))?;
    let audio = audio(file)?;
    Ok(Asked {
        model: model.to_owned(),
        audio,
        language,
        prompt: text("prompt").map(str::to_owned),
        format,
        temperature,
        warnings,
    })
}

/// The form's parts, sorted: the file, the text fields, and warnings for the rest.
struct Form {
    file: Option<Part>,
    texts: Map<String, Value>,
    warnings: Vec<String>,
}

/// Sorts the form's parts: a field given twice is a 400 naming it; an unknown or ignored field
/// is said in the warnings.
fn sort(parts: Vec<Part>) -> Result<Form, ApiError> {
    let mut file: Option<Part> = None;
    let mut texts: Map<String, Value> = Map::new();
    let mut warned: Vec<String> = Vec::new();
    let mut warnings = Vec::new();
    for part in parts {
        let Some(name) = part.name.clone() else {
            warn_once(&mut warned, &mut warnings, "", || {
                "a part without a name was ignored".to_owned()
            });
            continue;
        };
        let field = name.strip_suffix("[]").unwrap_or(&name);
        if field == "file" {
            if file.is_some() {
                return Err(at(
                    "file",
                    "is given more than once; one file is transcribed at a time",
                ));
            }
            file = Some(part);
        } else if TEXT_FIELDS.contains(&field) {
            if texts.contains_key(field) {
                return Err(at(field, "is given more than once"));
            }
            let text = String::from_utf8(part.data.to_vec())
                .map_err(|_| at(field, "is not UTF-8 text"))?;
            texts.insert(field.to_owned(), Value::String(text));
        } else if let Some((_, why)) = IGNORED.iter().find(|(known, _)| *known == field) {
            warn_once(&mut warned, &mut warnings, field, || {
                format!("`{field}` was ignored: {why}")
            });
        } else {
            warn_once(&mut warned, &mut warnings, field, || {
                format!("unknown field `{}` was ignored", clip(field))
            });
        }
    }
    Ok(Form {
        file,
        texts,
        warnings,
    })
}

/// `stream`: only false (or left out) is taken.
fn not_streamed(stream: Option<&str>) -> Result<(), ApiError> {
    if let Some(stream) = stream {
        match stream.to_ascii_lowercase().as_str() {
            "false" | "0" => {}
            "true" | "1" => {
                return Err(at(
                    "stream",
                    "streamed transcriptions are not supported here: leave `stream` out (or \
                     false) and the whole transcription comes back at once",
                ));
            }
            _ => return Err(at("stream", "expected true or false")),
        }
    }
    Ok(())
}

/// `response_format`: json (the default), text or verbose_json.
fn format(asked: Option<&str>) -> Result<Format, ApiError> {
    Ok(match asked {
        None | Some("json") => Format::Json,
        Some("text") => Format::Text,
        Some("verbose_json") => Format::VerboseJson,
        Some(subtitles @ ("srt" | "vtt")) => {
            return Err(at(
                "response_format",
                format!(
                    "\"{subtitles}\" is not supported here: subtitles need timestamps, which \
                     no model here makes; use {}",
                    crate::args::one_of(&FORMATS)
                ),
            ));
        }
        Some("diarized_json") => {
            return Err(at(
                "response_format",
                format!(
                    "\"diarized_json\" is not supported here: speakers are not told apart; use {}",
                    crate::args::one_of(&FORMATS)
                ),
            ));
        }
        Some(other) => {
            return Err(at(
                "response_format",
                format!(
                    "{:?} is not a response format; expected {}",
                    clip(other),
                    crate::args::one_of(&FORMATS)
                ),
            ));
        }
    })
}

/// `temperature`: a number from 0 to 1.
fn temperature(asked: Option<&str>) -> Result<Option<f64>, ApiError> {
    Ok(match asked {
        None => None,
        Some(t) => match t.parse::<f64>() {
            Ok(t) if (0.0..=1.0).contains(&t) => Some(t),
            _ => {
                return Err(at(
                    "temperature",
                    format!("expected a number from 0 to 1, got {:?}", clip(t)),
                ));
            }
        },
    })
}

/// `language`: an ISO-639-1 code (two or three letters).
fn language(asked: Option<&str>) -> Result<Option<String>, ApiError> {
    Ok(match asked {
        None => None,
        Some(code)
            if (2..=3).contains(&code.len()) && code.bytes().all(|b| b.is_ascii_alphabetic()) =>
        {
            Some(code.to_ascii_lowercase())
        }
        Some(other) => {
            return Err(at(
                "language",
                format!(
                    "expected the language's ISO-639-1 code, such as \"en\" or \"de\", got {:?}",
                    clip(other)
                ),
            ));
        }
    })
}

/// Adds the warning `say` makes, once for each field, and for at most [`MAX_WARNED`] fields.
fn warn_once(
    warned: &mut Vec<String>,
    warnings: &mut Vec<String>,
    field: &str,
    say: impl FnOnce() -> String,
) {
    if warned.len() < MAX_WARNED && !warned.iter().any(|w| w == field) {
        warned.push(field.to_owned());
        warnings.push(say());
    }
}

/// The file part's audio, its type told by its bytes: a WAV file (a RIFF `WAVE` header) or an
/// MP3 one (an ID3 tag or MPEG audio frames; past some leading bytes when the file says it is
/// MP3). Anything else is a 400 naming `file`, and what it was sent as.
fn audio(file: Part) -> Result<Audio, ApiError> {
    if file.data.is_empty() {
        return Err(at("file", "is empty: send the audio to transcribe"));
    }
    let lower = |s: &Option<String>| s.as_deref().unwrap_or_default().to_ascii_lowercase();
    let (name, kind) = (lower(&file.file_name), lower(&file.content_type));
    let says_mp3 = name.ends_with(".mp3")
        || name.ends_with(".mpga")
        || matches!(kind.as_str(), "audio/mpeg" | "audio/mp3" | "audio/mpeg3");
    let mime = if media::is_wav(&file.data) {
        Some("audio/wav")
    } else if mp3_start(&file.data, says_mp3).is_some() {
        Some("audio/mpeg")
    } else {
        None
    };
    match mime {
        Some(mime) => Ok(Audio {
            data: file.data,
            mime,
        }),
        None => {
            let name = file
                .file_name
                .as_deref()
                .map(|n| format!("{:?}", clip(n)))
                .unwrap_or_else(|| "without a name".to_owned());
            let kind = file.content_type.as_deref().unwrap_or("no content type");
            Err(at(
                "file",
                format!(
                    "the file ({name}, {}) is not WAV or MP3 audio: this server takes {} \
                     (convert other audio, such as FLAC, M4A, Ogg or WebM, first)",
                    clip(kind),
                    crate::args::one_of(&media::AUDIO_TYPES)
                ),
            ))
        }
    }
}

/// One MPEG audio frame's header, read.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Frame {
    /// Bytes the frame takes, its header included.
    len: usize,
    samples: u32,
    sample_rate: u32,
}

/// Bit rates (kbit/s) by index 1 to 14: MPEG-1 layers I, II and III, and MPEG-2 and 2.5
/// layer I, then II and III.
const KBPS_V1_L1: [u16; 14] = [
    32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448,
];
const KBPS_V1_L2: [u16; 14] = [
    32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384,
];
const KBPS_V1_L3: [u16; 14] = [
    32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320,
];
const KBPS_V2_L1: [u16; 14] = [
    32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256,
];
const KBPS_V2_L23: [u16; 14] = [8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160];

/// The MPEG audio frame whose header begins `data`, if one does (free-format frames, which
/// say no bit rate, are not read).
fn frame(data: &[u8]) -> Option<Frame> {
    let &[a, b, c, _] = data.get(..4)? else {
        return None;
    };
    if a != 0xFF || b & 0xE0 != 0xE0 {
        return None;
    }
    let version = (b >> 3) & 3; // 0: MPEG-2.5, 1: reserved, 2: MPEG-2, 3: MPEG-1
    let layer = (b >> 1) & 3; // 1: III, 2: II, 3: I, 0: reserved
    let bitrate_index = usize::from(c >> 4);
    let rate_index = usize::from((c >> 2) & 3);
    let padding = u32::from((c >> 1) & 1);
    let mpeg1 = version == 3;
    let table = match (version, layer, mpeg1) {
        (1, _, _) | (_, 0, _) => return None,
        (_, 3, true) => &KBPS_V1_L1,
        (_, 2, true) => &KBPS_V1_L2,
        (_, _, true) => &KBPS_V1_L3,
        (_, 3, false) => &KBPS_V2_L1,
        (_, _, false) => &KBPS_V2_L23,
    };
    let kbps = u32::from(*table.get(bitrate_index.checked_sub(1)?)?);
    let base = *[44_100u32, 48_000, 32_000].get(rate_index)?;
    let sample_rate = match version {
        3 => base,
        2 => base / 2,
        _ => base / 4,
    };
    let bitrate = kbps * 1000;
    let (samples, len) = match layer {
        3 => (384, (12 * bitrate / sample_rate + padding) * 4),
        2 => (1152, 144 * bitrate / sample_rate + padding),
        _ if mpeg1 => (1152, 144 * bitrate / sample_rate + padding),
        _ => (576, 72 * bitrate / sample_rate + padding),
    };
    Some(Frame {
        len: usize::try_from(len).ok()?,
        samples,
        sample_rate,
    })
}

/// Whether an MPEG audio frame begins at `at` and ends the data or is followed by another.
fn frames_at(data: &[u8], at: usize) -> Option<Frame> {
    let rest = data.get(at..)?;
    let first = frame(rest)?;
    if first.len < 4 {
        return None;
    }
    let next = rest.get(first.len..).unwrap_or_default();
    (next.is_empty() || frame(next).is_some()).then_some(first)
}

/// How far into the bytes a leading ID3v2 tag reaches (0 without one): its header (`ID3`, a
/// version from 2 to 4, flags, a size of four 7-bit bytes), its size, and its footer.
fn id3_len(data: &[u8]) -> usize {
    let Some(&[b'I', b'D', b'3', version, revision, flags, s0, s1, s2, s3]) = data.get(..10) else {
        return 0;
    };
    let size = [s0, s1, s2, s3];
    if !(2..=4).contains(&version) || revision == 0xFF || size.iter().any(|b| b & 0x80 != 0) {
        return 0;
    }
    let size = size.iter().fold(0usize, |n, b| (n << 7) | usize::from(*b));
    let footer = if flags & 0x10 != 0 { 10 } else { 0 };
    10 + size + footer
}

/// Where an MP3 file's first frame begins: after its ID3 tag, at once; or, after a tag or in
/// a file that says it is MP3 (`declared`), within 64 KiB. A tag with no frame found after it
/// still says MP3 (its frames are then not read).
fn mp3_start(data: &[u8], declared: bool) -> Option<usize> {
    let tag = id3_len(data);
    if frames_at(data, tag).is_some() {
        return Some(tag);
    }
    if tag == 0 && !declared {
        return None;
    }
    let end = data.len().min(tag.saturating_add(64 * 1024));
    (tag..end)
        .find(|&at| frames_at(data, at).is_some())
        .or((tag > 0).then_some(tag))
}

/// The audio's length in seconds, when its header or frames say: a WAV file's `data` chunk over
/// its byte rate, an MP3 file's frames' samples over their sample rate.
pub fn duration(audio: &Audio) -> Option<f64> {
    match audio.mime {
        "audio/wav" => wav_seconds(&audio.data),
        _ => mp3_seconds(&audio.data),
    }
}

fn le_u32(bytes: Option<&[u8]>) -> Option<u32> {
    Some(u32::from_le_bytes(bytes?.try_into().ok()?))
}

fn wav_seconds(data: &[u8]) -> Option<f64> {
    let mut at = 12usize;
    let mut byte_rate = None;
    loop {
        let id = data.get(at..at.checked_add(4)?)?;
        let size = usize::try_from(le_u32(data.get(at + 4..at.checked_add(8)?))?).ok()?;
        let body = at + 8;
        if id == b"fmt " {
            byte_rate = le_u32(data.get(body.checked_add(8)?..body.checked_add(12)?));
        } else if id == b"data" {
            // A file written as a stream says a size it does not have.
            let size = size.min(data.len().saturating_sub(body));
            let rate = byte_rate.filter(|r| *r > 0)?;
            return Some(size as f64 / f64::from(rate));
        }
        at = body.checked_add(size)?.checked_add(size & 1)?;
    }
}

fn mp3_seconds(data: &[u8]) -> Option<f64> {
    let mut at = mp3_start(data, true)?;
    let mut seconds = 0.0;
    let mut frames = 0usize;
    while let Some(f) = data.get(at..).and_then(frame) {
        if f.len < 4 || at.checked_add(f.len)? > data.len() {
            break;
        }
        seconds += f64::from(f.samples) / f64::from(f.sample_rate);
        frames += 1;
        at += f.len;
    }
    (frames > 0).then_some(seconds)
}

/// What the model is asked: the audio transcribed verbatim, in the language named, with the
/// prompt as context.
pub fn instruction(asked: &Asked) -> String {
    let mut text = String::from(
        "Transcribe this audio verbatim: write down every word that is spoken, in the language \
         it is spoken in, and answer with the transcription alone (no introduction, notes, \
         quotation marks or timestamps). If nothing is spoken, answer with nothing.",
    );
    if let Some(language) = &asked.language {
        text.push_str(&format!(
            " The speech is in the language whose ISO-639-1 code is \"{language}\"."
        ));
    }
    if let Some(prompt) = &asked.prompt {
        text.push_str(
            "\n\nContext for the transcription (text spoken before this audio, or how its names \
             and terms are spelt; do not transcribe it):\n",
        );
        text.push_str(prompt);
    }
    text
}

/// The audio as a block of the user turn: its size checked against the media limit and its
/// hash taken, as every API's audio is (an error names `file`).
pub fn audio_block(audio: &Audio, limits: &Limits) -> Result<Block, ApiError> {
    let kind = media::Kind::Audio;
    Ok(media::block_of_bytes(
        kind,
        &audio.data,
        audio.mime,
        "file",
        limits,
    )?)
}

/// Tokens a transcript may have for each 30 seconds of audio, begun: Whisper's decoder writes
/// at most 448 a window. A model that loops on the audio stops there, not at its context's end.
const TOKENS_PER_WINDOW: u64 = 448;

/// The windows of audio whose length is not known (10 minutes' worth).
const UNKNOWN_WINDOWS: u64 = 20;

/// The transcript's token limit for `audio`.
fn answer_tokens(audio: &Audio) -> u64 {
    let windows = duration(audio).map_or(UNKNOWN_WINDOWS, |s| (s / 30.0).ceil().max(1.0) as u64);
    TOKENS_PER_WINDOW.saturating_mul(windows)
}

/// The call: a chat completion of `asked.model` (routed as every API's model is), whose one
/// user turn holds the instruction and then `audio`, its answer held to [`answer_tokens`].
pub fn call(api: &Api, asked: &Asked, audio: Block) -> Result<Call, ApiError> {
    let mut arguments = json!({
        "model": asked.model,
        "messages": [{"role": "user", "content": instruction(asked)}],
        "max_tokens": answer_tokens(&asked.audio),
    });
    if let (Some(t), Some(map)) = (asked.temperature, arguments.as_object_mut()) {
        map.insert("temperature".into(), json!(t));
    }
    let dialect = super::chat::DIALECT;
    let body = match arguments {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let mut call = api.parse(dialect, &super::prepare(dialect, body, None, false))?;
    with_audio(&mut call, audio);
    Ok(call)
}

/// `call` with `audio` after the text of its last user turn (and in the transcript a cursor
/// commits to).
fn with_audio(call: &mut Call, audio: Block) {
    let Some(turn) = call
        .request
        .turns
        .iter_mut()
        .rev()
        .find(|t| t.role == Role::User)
    else {
        return;
    };
    turn.blocks.push(audio);
    if let Some(entry) = call.transcript.iter_mut().rev().find(|e| e.role == "user") {
        *entry = Entry::from_blocks("user", &turn.blocks);
    }
}

/// A refusal of the call, as this endpoint says it: a refusal of the audio part (a model that
/// takes no audio, or audio it cannot decode: the embedded model names the part) is a 400
/// naming `file`; any other error as it is.
pub fn refusal(e: ApiError, model: &str) -> ApiError {
    let of_the_audio =
        e.status == 400 && (e.param.as_deref()).is_some_and(|p| p.contains("audio part"));
    if !of_the_audio {
        return e;
    }
    let said = (e.message.split_once("`: ")).map_or(e.message.as_str(), |(_, said)| said);
    ApiError {
        param: Some("file".into()),
        ..ApiError::invalid(format!(
            "invalid argument `file`: the model {:?} cannot transcribe it: {said}",
            clip(model),
        ))
    }
}

/// The transcription of an answer: its text, trimmed.
pub fn text_of(answered: &crate::service::Answered) -> String {
    answered.finished.answer.completion_text().trim().to_owned()
}

/// A warning for an answer cut short by the token limit.
pub fn cut_short(answered: &crate::service::Answered) -> Option<String> {
    (answered.finished.finish == Finish::MaxTokens).then(|| {
        "the transcription was cut short: the model reached its output token limit".to_owned()
    })
}

/// The JSON object of a transcription (`json` and `verbose_json`; `text` is the text alone):
/// `json` with the model's token usage, `verbose_json` with the language asked for and the
/// audio's duration (and its usage in seconds) when they are known.
pub fn object(asked: &Asked, text: &str, usage: crate::call::Usage) -> Value {
    match asked.format {
        Format::VerboseJson => {
            let mut object = Map::new();
            object.insert("task".into(), json!("transcribe"));
            if let Some(language) = &asked.language {
                object.insert("language".into(), json!(language));
            }
            let seconds = duration(&asked.audio);
            if let Some(seconds) = seconds {
                object.insert("duration".into(), json!(seconds));
            }
            object.insert("text".into(), json!(text));
            if let Some(seconds) = seconds {
                object.insert(
                    "usage".into(),
                    json!({"type": "duration", "seconds": seconds}),
                );
            }
            Value::Object(object)
        }
        Format::Json | Format::Text => json!({
            "text": text,
            "usage": {
                "type": "tokens",
                "input_tokens": usage.prompt,
                "output_tokens": usage.completion,
                "total_tokens": usage.total(),
                "estimated": usage.estimated,
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A WAV file of `samples` 16-bit mono samples at `rate`.
    fn wav(rate: u32, samples: usize) -> Vec<u8> {
        let data_len = (samples * 2) as u32;
        let mut w = Vec::new();
        w.extend_from_slice(b"RIFF");
        w.extend_from_slice(&(36 + data_len).to_le_bytes());
        w.extend_from_slice(b"WAVEfmt ");
        w.extend_from_slice(&16u32.to_le_bytes());
        w.extend_from_slice(&1u16.to_le_bytes());
        w.extend_from_slice(&1u16.to_le_bytes());
        w.extend_from_slice(&rate.to_le_bytes());
        w.extend_from_slice(&(rate * 2).to_le_bytes());
        w.extend_from_slice(&2u16.to_le_bytes());
        w.extend_from_slice(&16u16.to_le_bytes());
        // A chunk of another kind, of odd length (padded), before the data.
        w.extend_from_slice(b"LIST");
        w.extend_from_slice(&3u32.to_le_bytes());
        w.extend_from_slice(b"abc\0");
        w.extend_from_slice(b"data");
        w.extend_from_slice(&data_len.to_le_bytes());
        for i in 0..samples {
            let s = ((i as f64 * 0.1).sin() * 8000.0) as i16;
            w.extend_from_slice(&s.to_le_bytes());
        }
        w
    }

    /// An MP3 file of `n` silent MPEG-1 layer III frames at 128 kbit/s and 44.1 kHz, after an
    /// ID3v2 tag when `tagged`.
    fn mp3(n: usize, tagged: bool) -> Vec<u8> {
        let mut m = Vec::new();
        if tagged {
            m.extend_from_slice(b"ID3\x04\x00\x00\x00\x00\x00\x0a");
            m.extend_from_slice(&[0; 10]);
        }
        for _ in 0..n {
            let mut frame = vec![0u8; 417];
            frame[..4].copy_from_slice(&[0xFF, 0xFB, 0x90, 0x64]);
            m.extend_from_slice(&frame);
        }
        m
    }

    fn file(name: &str, kind: &str, data: &[u8]) -> Part {
        Part {
            name: Some("file".into()),
            file_name: Some(name.into()),
            content_type: Some(kind.into()),
            data: Bytes::copy_from_slice(data),
        }
    }

    fn form(extra: &[(&str, &str)]) -> Vec<Part> {
        let mut parts = vec![
            file("a.wav", "audio/x-wav", &wav(16_000, 8_000)),
            Part::text("model", "whisper-1"),
        ];
        parts.extend(extra.iter().map(|(k, v)| Part::text(k, v)));
        parts
    }

    fn refused(parts: Vec<Part>) -> ApiError {
        read(parts).unwrap_err()
    }

    #[test]
    fn a_form_is_read_with_its_defaults_and_its_fields() {
        let asked = read(form(&[])).unwrap();
        assert_eq!(asked.model, "whisper-1");
        assert_eq!(asked.audio.mime, "audio/wav");
        assert_eq!(asked.format, Format::Json);
        assert_eq!((asked.language.as_deref(), asked.temperature), (None, None));
        assert!(asked.warnings.is_empty());
        let asked = read(form(&[
            ("language", " EN "),
            ("prompt", "Names: Zoë, Ångström."),
            ("response_format", "verbose_json"),
            ("temperature", "0.2"),
            ("stream", "false"),
            ("timestamp_granularities[]", "word"),
            ("timestamp_granularities[]", "segment"),
            ("colour", "blue"),
        ]))
        .unwrap();
        assert_eq!(asked.language.as_deref(), Some("en"));
        assert_eq!(asked.prompt.as_deref(), Some("Names: Zoë, Ångström."));
        assert_eq!(asked.format, Format::VerboseJson);
        assert_eq!(asked.temperature, Some(0.2));
        assert_eq!(asked.warnings.len(), 2, "{:?}", asked.warnings);
        assert!(asked.warnings[0].contains("timestamp_granularities"));
        assert!(asked.warnings[1].contains("unknown field `colour`"));
        let text = instruction(&asked);
        assert!(text.starts_with("Transcribe this audio verbatim"), "{text}");
        assert!(text.contains("\"en\"") && text.ends_with("Names: Zoë, Ångström."));
    }

    #[test]
    fn each_bad_field_is_a_400_naming_it() {
        let named = |e: ApiError, param: &str, words: &str| {
            assert_eq!(e.status, 400, "{e:?}");
            assert_eq!(e.param.as_deref(), Some(param), "{e:?}");
            assert!(e.message.contains(words), "{}", e.message);
        };
        named(
            refused(vec![Part::text("model", "m")]),
            "file",
            "is required",
        );
        named(
            refused(vec![file("a.wav", "audio/wav", &wav(8_000, 10))]),
            "model",
            "is required",
        );
        named(
            refused(vec![
                file("notes.txt", "text/plain", b"hello there"),
                Part::text("model", "m"),
            ]),
            "file",
            "\"notes.txt\", text/plain) is not WAV or MP3 audio",
        );
        named(
            refused(vec![
                file("a.wav", "audio/wav", b""),
                Part::text("model", "m"),
            ]),
            "file",
            "is empty",
        );
        let mut twice = form(&[]);
        twice.push(file("b.wav", "audio/wav", &wav(8_000, 10)));
        named(refused(twice), "file", "more than once");
        named(
            refused(form(&[("model", "again")])),
            "model",
            "more than once",
        );
        for format in ["srt", "vtt"] {
            named(
                refused(form(&[("response_format", format)])),
                "response_format",
                "\"json\", \"text\", \"verbose_json\"",
            );
        }
        named(
            refused(form(&[("response_format", "diarized_json")])),
            "response_format",
            "speakers",
        );
        named(
            refused(form(&[("response_format", "xml")])),
            "response_format",
            "not a response format",
        );
        named(
            refused(form(&[("stream", "true")])),
            "stream",
            "not supported",
        );
        named(
            refused(form(&[("temperature", "1.5")])),
            "temperature",
            "from 0 to 1",
        );
        named(
            refused(form(&[("temperature", "NaN")])),
            "temperature",
            "from 0 to 1",
        );
        named(
            refused(form(&[("language", "English")])),
            "language",
            "ISO-639-1",
        );
        let mut bad_text = form(&[]);
        bad_text.push(Part {
            data: Bytes::from_static(b"\xff\xfe"),
            ..Part::text("prompt", "")
        });
        named(refused(bad_text), "prompt", "UTF-8");
    }

    #[test]
    fn the_audio_type_is_told_by_its_bytes() {
        let asked = |name: &str, kind: &str, data: &[u8]| {
            read(vec![file(name, kind, data), Part::text("model", "m")]).map(|a| a.audio.mime)
        };
        // A WAV file sent as anything is WAV; an MP3 one, with or without a tag, MP3.
        assert_eq!(
            asked("x", "application/octet-stream", &wav(8_000, 4)).unwrap(),
            "audio/wav"
        );
        assert_eq!(
            asked("x.wav", "audio/wav", &mp3(3, false)).unwrap(),
            "audio/mpeg"
        );
        assert_eq!(asked("x", "", &mp3(1, true)).unwrap(), "audio/mpeg");
        // Leading bytes before the first frame are passed over for a file that says it is MP3.
        let mut junk = vec![0u8; 100];
        junk.extend(mp3(2, false));
        assert_eq!(asked("song.mp3", "", &junk).unwrap(), "audio/mpeg");
        assert!(asked("song.bin", "application/octet-stream", &junk).is_err());
        // Other audio, named as such, is refused all the same.
        let e = asked("a.flac", "audio/flac", b"fLaC\0\0\0\x22").unwrap_err();
        assert!(e.message.contains("audio/flac"), "{}", e.message);
    }

    #[test]
    fn a_transcript_is_held_to_448_tokens_a_window_of_30_seconds() {
        let of = |data: Vec<u8>| {
            answer_tokens(&Audio {
                data: Bytes::from(data),
                mime: "audio/wav",
            })
        };
        assert_eq!(of(wav(16_000, 8_000)), 448);
        // 31 seconds: two windows.
        assert_eq!(of(wav(1_000, 31_000)), 896);
        // Not a WAV header: its length unknown, ten minutes' worth.
        assert_eq!(of(b"RIFF".to_vec()), 448 * 20);
    }

    #[test]
    fn durations_come_from_the_wav_header_and_the_mp3_frames() {
        let of = |data: Vec<u8>, mime| {
            duration(&Audio {
                data: Bytes::from(data),
                mime,
            })
        };
        assert_eq!(of(wav(16_000, 8_000), "audio/wav"), Some(0.5));
        assert_eq!(of(wav(8_000, 0), "audio/wav"), Some(0.0));
        // A stream's WAV header says more data than there is: what there is counts.
        let mut cut = wav(16_000, 16_000);
        cut.truncate(cut.len() - 16_000);
        assert_eq!(of(cut, "audio/wav"), Some(0.5));
        // A header cut short, or no data chunk: unknown.
        assert_eq!(of(wav(16_000, 10)[..30].to_vec(), "audio/wav"), None);
        assert_eq!(of(b"RIFF\0\0\0\0WAVE".to_vec(), "audio/wav"), None);
        let seconds = of(mp3(100, true), "audio/mpeg").unwrap();
        assert!(
            (seconds - 100.0 * 1152.0 / 44_100.0).abs() < 1e-9,
            "{seconds}"
        );
        assert_eq!(of(b"ID3".to_vec(), "audio/mpeg"), None);
    }

    #[test]
    fn hostile_headers_neither_panic_nor_loop() {
        for data in [
            &b""[..],
            b"RIFF",
            b"RIFF\xff\xff\xff\xffWAVEfmt \xff\xff\xff\xff",
            b"RIFF\0\0\0\0WAVEdata\xff\xff\xff\xff",
            b"ID3\x04\0\0\x7f\x7f\x7f\x7f",
            b"\xff\xfb",
            b"\xff\xff\xff\xff",
            b"\xff\xfb\x00\x00",
        ] {
            for mime in media::AUDIO_TYPES {
                let _ = duration(&Audio {
                    data: Bytes::copy_from_slice(data),
                    mime,
                });
            }
            let _ = read(vec![
                file("x.mp3", "audio/mpeg", data),
                Part::text("model", "m"),
            ]);
        }
    }

    #[test]
    fn a_text_only_models_refusal_names_the_file() {
        let mut request = crate::backends::direct::ModelRequest::default();
        request.base.turns.push(crate::call::Turn {
            role: Role::User,
            blocks: vec![
                Block::Text("Transcribe".into()),
                Block::Audio {
                    data: "AAAA".into(),
                    mime: "audio/wav".into(),
                    sha256: [0; 32],
                },
            ],
        });
        let said = crate::local::no_projector(&request, "qwen").unwrap_err();
        let e = refusal(ApiError::from(said), "local");
        assert_eq!((e.status, e.param.as_deref()), (400, Some("file")));
        assert!(
            e.message.contains("\"local\" cannot transcribe it")
                && e.message.contains("qwen has no audio input"),
            "{}",
            e.message
        );
        // Other errors pass as they are.
        let other = ApiError::invalid("something else");
        assert_eq!(refusal(other.clone(), "local"), other);
    }

    #[test]
    fn the_objects_say_what_is_known() {
        let usage = crate::call::Usage {
            prompt: 10,
            completion: 3,
            estimated: false,
            cached: None,
        };
        let mut asked = read(form(&[])).unwrap();
        assert_eq!(
            object(&asked, "Hello.", usage),
            json!({"text": "Hello.", "usage": {"type": "tokens", "input_tokens": 10,
                   "output_tokens": 3, "total_tokens": 13, "estimated": false}})
        );
        asked.format = Format::VerboseJson;
        assert_eq!(
            object(&asked, "Hello.", usage),
            json!({"task": "transcribe", "duration": 0.5, "text": "Hello.",
                   "usage": {"type": "duration", "seconds": 0.5}})
        );
        asked.language = Some("en".into());
        assert_eq!(object(&asked, "Hello.", usage)["language"], "en");
    }
}
