//! Images and audio in requests: inline base64 only. The server never fetches anything, so a
//! remote URL is refused with an error that says how to inline it.

use crate::call::Block;
use crate::error::{CallError, CallResult};
use crate::limits::Limits;
use base64::Engine as _;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};

/// URL-safe base64, padded or not.
const URL_SAFE_INDIFFERENT: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);
use sha2::{Digest, Sha256};

pub const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];
pub const AUDIO_TYPES: [&str; 2] = ["audio/wav", "audio/mpeg"];

/// Decodes `data` (base64) at `path`, checking its size; returns the decoded bytes.
pub fn decode(data: &str, path: &str, limits: &Limits) -> CallResult<Vec<u8>> {
    // Base64 is 4 characters per 3 bytes: refuse oversized data before decoding it.
    let approx = data.len() / 4 * 3;
    if approx > limits.max_media_bytes + 3 {
        return Err(too_big(path, approx, limits));
    }
    // Standard base64, or the URL-safe alphabet (with or without padding), as proto3's JSON
    // takes bytes: the google-genai SDK sends `inlineData` URL-safe.
    let data = data.trim();
    let bytes = STANDARD
        .decode(data)
        .or_else(|e| URL_SAFE_INDIFFERENT.decode(data).map_err(|_| e))
        .map_err(|e| CallError::at(path, format!("is not valid base64 ({e})")))?;
    if bytes.len() > limits.max_media_bytes {
        return Err(too_big(path, bytes.len(), limits));
    }
    Ok(bytes)
}

fn too_big(path: &str, size: usize, limits: &Limits) -> CallError {
    CallError::at(
        path,
        format!(
            "media of about {size} bytes is over the limit of {} bytes \
             (AGENT_AS_MODEL_MAX_MEDIA_BYTES)",
            limits.max_media_bytes
        ),
    )
}

fn check_type(mime: &str, allowed: &[&str], path: &str) -> CallResult<()> {
    if allowed.contains(&mime) {
        Ok(())
    } else {
        Err(CallError::at(
            path,
            format!(
                "unsupported media type {mime:?}; expected {}",
                crate::args::one_of(allowed)
            ),
        ))
    }
}

/// What kind of media a part carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Image,
    Audio,
}

/// An image or audio block from base64 `data` of type `mime`, both checked; the paths name
/// the fields in errors.
pub fn block(
    kind: Kind,
    data: &str,
    mime: &str,
    data_path: &str,
    mime_path: &str,
    limits: &Limits,
) -> CallResult<Block> {
    let allowed: &[&str] = match kind {
        Kind::Image => &IMAGE_TYPES,
        Kind::Audio => &AUDIO_TYPES,
    };
    check_type(mime, allowed, mime_path)?;
    let bytes = decode(data, data_path, limits)?;
    // Kept in the standard alphabet, as every API this server speaks to writes it.
    let data = data.trim();
    let url_safe = data.contains(['-', '_']) || !data.len().is_multiple_of(4);
    let data = if url_safe {
        STANDARD.encode(&bytes)
    } else {
        data.to_owned()
    };
    Ok(encoded(kind, data, &bytes, mime))
}

/// An image or audio block of `bytes` (a file's, as a form sends it) of type `mime`: their
/// size checked against the media limit (`path` names them), base64-encoded once.
pub fn block_of_bytes(
    kind: Kind,
    bytes: &[u8],
    mime: &str,
    path: &str,
    limits: &Limits,
) -> CallResult<Block> {
    if bytes.len() > limits.max_media_bytes {
        return Err(too_big(path, bytes.len(), limits));
    }
    Ok(encoded(kind, STANDARD.encode(bytes), bytes, mime))
}

/// The block of `bytes`, whose standard base64 is `data`.
fn encoded(kind: Kind, data: String, bytes: &[u8], mime: &str) -> Block {
    let sha256: [u8; 32] = Sha256::digest(bytes).into();
    let mime = mime.to_owned();
    match kind {
        Kind::Image => Block::Image { data, mime, sha256 },
        Kind::Audio => Block::Audio { data, mime, sha256 },
    }
}

/// Whether `bytes` begin as a WAV file does: `RIFF`, a size, `WAVE`.
pub fn is_wav(bytes: &[u8]) -> bool {
    bytes.starts_with(b"RIFF") && bytes.get(8..12) == Some(b"WAVE".as_slice())
}

/// An image given as a URL, which must be a `data:<mime>;base64,<data>` URL.
pub fn image_url(url: &str, path: &str, limits: &Limits) -> CallResult<Block> {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https:/") {
        return Err(CallError::at(
            path,
            "remote image URLs are not fetched (this server never fetches anything): inline the \
             image as a data URL, data:image/png;base64,<data>",
        ));
    }
    let Some(rest) = url.strip_prefix("data:") else {
        return Err(CallError::at(
            path,
            "expected a data URL, data:image/png;base64,<data>",
        ));
    };
    let Some((mime, data)) = rest.split_once(";base64,") else {
        return Err(CallError::at(
            path,
            "expected a base64 data URL, data:<mime type>;base64,<data>",
        ));
    };
    block(Kind::Image, data, mime, path, path, limits)
}

/// MIME types read as text besides `text/*`.
const TEXT_TYPES: [&str; 8] = [
    "application/json",
    "application/xml",
    "application/yaml",
    "application/x-yaml",
    "application/toml",
    "application/javascript",
    "application/x-sh",
    "application/sql",
];

/// File name endings read as text when the data names no MIME type.
const TEXT_ENDINGS: [&str; 24] = [
    "txt", "md", "markdown", "csv", "tsv", "json", "jsonl", "xml", "yaml", "yml", "toml", "ini",
    "html", "css", "js", "ts", "py", "rs", "go", "java", "c", "h", "sh", "sql",
];

/// A file part (`input_file`): its `file_data`, a `data:<mime>;base64,<data>` URL or bare
/// base64, read as UTF-8 text into the turn, headed by its `filename`. Only text files are
/// read: no backend here reads a PDF or an office document, so any other type is refused by
/// name; a `file_url` is not fetched and a `file_id` names an upload this server does not keep.
pub fn text_file(part: &crate::args::Obj<'_>, limits: &Limits) -> CallResult<Block> {
    if part.get("file_url").is_some_and(|v| !v.is_null()) {
        return Err(CallError::at(
            &part.path("file_url"),
            "file URLs are not fetched (this server never fetches anything): send the file's \
             content as file_data (base64) or as input_text",
        ));
    }
    let name = part.opt_str("filename")?.unwrap_or("file");
    let path = part.path("file_data");
    let (mime, data) = file_data(part, &path)?;
    let ending = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    let text_like = match &mime {
        Some(m) => m.starts_with("text/") || TEXT_TYPES.contains(&m.as_str()),
        None => TEXT_ENDINGS.contains(&ending.as_str()),
    };
    let unreadable = || {
        let kind = mime
            .clone()
            .unwrap_or_else(|| format!("{:?}", crate::error::clip(name)));
        CallError::at(
            &path,
            format!(
                "a file of type {kind} cannot be read by any backend here; text files (text/*, \
                 JSON, XML, YAML, TOML, CSV, source code) are read into the turn: send other \
                 documents' text as input_text"
            ),
        )
    };
    if !text_like {
        return Err(unreadable());
    }
    let bytes = decode(data, &path, limits)?;
    let text = String::from_utf8(bytes).map_err(|_| unreadable())?;
    Ok(Block::Text(format!(
        "<file name=\"{}\">\n{text}\n</file>",
        crate::error::clip(name)
    )))
}

/// A file part's `file_data` (at `path`): its MIME type when it is a data URL, and its base64.
fn file_data<'a>(part: &crate::args::Obj<'a>, path: &str) -> CallResult<(Option<String>, &'a str)> {
    let Some(data) = part.opt_str("file_data")? else {
        let field = if part.get("file_id").is_some() {
            "file_id"
        } else {
            "file_data"
        };
        return Err(CallError::at(
            &part.path(field),
            "a file is read from its file_data (base64 or a data URL); this server keeps no \
             uploaded files to name by file_id",
        ));
    };
    match data.strip_prefix("data:") {
        Some(rest) => match rest.split_once(";base64,") {
            Some((mime, data)) => Ok((Some(mime.to_ascii_lowercase()), data)),
            None => Err(CallError::at(
                path,
                "expected base64 or a base64 data URL, data:<mime type>;base64,<data>",
            )),
        },
        None => Ok((None, data)),
    }
}

/// OpenAI's `input_audio.format` (`wav`, `mp3`) as a MIME type.
pub fn audio_format(format: &str, path: &str) -> CallResult<&'static str> {
    match format {
        "wav" => Ok("audio/wav"),
        "mp3" => Ok("audio/mpeg"),
        other => Err(CallError::at(
            path,
            format!("unsupported audio format {other:?}; expected one of \"wav\", \"mp3\""),
        )),
    }
}

/// An `input_audio` part (OpenAI's chat and Responses): `{"input_audio": {"data": <base64>,
/// "format": "wav" | "mp3"}}`.
pub fn input_audio(part: &crate::args::Obj<'_>, limits: &Limits) -> CallResult<Block> {
    let path = part.path("input_audio");
    let audio = crate::args::Obj::new(
        crate::args::as_object(part.required("input_audio")?, &path)?,
        path.as_str(),
    );
    let mime = audio_format(audio.required_str("format")?, &audio.path("format"))?;
    block(
        Kind::Audio,
        audio.required_str("data")?,
        mime,
        &audio.path("data"),
        &audio.path("format"),
        limits,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_safe_base64_is_taken_and_kept_in_the_standard_alphabet() {
        let bytes = [0xfb_u8, 0xff, 0xbf, 0x01];
        let l = Limits::default();
        // "+/+/AQ==" in the standard alphabet; the google-genai SDK writes "-_-_AQ" or "-_-_AQ==".
        for sent in ["-_-_AQ", "-_-_AQ=="] {
            let block = block(Kind::Image, sent, "image/png", "d", "m", &l).unwrap();
            let Block::Image { data, sha256, .. } = block else {
                panic!("{block:?}");
            };
            assert_eq!(data, "+/+/AQ==");
            assert_eq!(sha256, <[u8; 32]>::from(Sha256::digest(bytes)));
        }
        let e = decode("-_-_A*", "d", &l).unwrap_err().to_string();
        assert!(e.contains("`d`") && e.contains("not valid base64"), "{e}");
    }

    #[test]
    fn data_urls_only_with_known_types_and_valid_base64() {
        let l = Limits::default();
        assert_eq!(
            image_url("data:image/png;base64,iVBORw0K", "p", &l).unwrap(),
            Block::Image {
                data: "iVBORw0K".into(),
                mime: "image/png".into(),
                sha256: Sha256::digest(STANDARD.decode("iVBORw0K").unwrap()).into(),
            }
        );
        let e = image_url(
            "https://example.com/cat.png",
            "messages[0].content[1].image_url.url",
            &l,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("`messages[0].content[1].image_url.url`")
                && e.contains("inline the image as a data URL"),
            "{e}"
        );
        let e = image_url("data:image/tiff;base64,AAAA", "p", &l)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unsupported media type \"image/tiff\""), "{e}");
        let e = image_url("data:image/png;base64,not base64!", "p", &l)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not valid base64"), "{e}");
        let small = Limits {
            max_media_bytes: 4,
            ..Limits::default()
        };
        let e = image_url("data:image/png;base64,AAAAAAAAAAAA", "p", &small)
            .unwrap_err()
            .to_string();
        assert!(e.contains("over the limit of 4 bytes"), "{e}");
        assert_eq!(audio_format("mp3", "p").unwrap(), "audio/mpeg");
        assert!(audio_format("flac", "p").is_err());
    }
}
