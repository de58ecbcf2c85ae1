//! OpenAI's `POST /v1/audio/transcriptions` on the real binary. The official `openai` SDK
//! (`tests/e2e/api/openai_transcribe.py`) sends a WAV file made here (a quarter second of a
//! 440 Hz tone) to a models-file entry that is a scripted OpenAI-compatible provider: the
//! provider is asked a chat completion whose user turn is the instruction and an `input_audio`
//! part holding the file's bytes, and its answer, trimmed, comes back as `json`, `text` and
//! `verbose_json` (the WAV's duration, the language asked for). `srt`, `stream` and a model that
//! takes text only (the embedded model, refusing before it would load: its file is never read)
//! are 400s naming the field. Hand-made forms check the rest of the request's bounds: a missing
//! `file` or `model`, a text file, an unknown model, a body that is not a form, the token; and
//! the limits: the request-body limit (413) and the media limit (a 400 naming `file`).

use crate::api_sdks::{Server, TOKEN, folder, ok, run_client};
use crate::common::openai::{Reply, Scripted, completion};
use crate::common::{http_client, sdk_python};
use base64::Engine as _;
use serde_json::{Value, json};
use std::path::Path;

const ANSWER: &str = "A steady tone, and no words.";

/// A WAV file: `seconds` of a 440 Hz sine wave, 16-bit mono at 16 kHz.
fn tone(seconds: f64) -> Vec<u8> {
    let rate = 16_000u32;
    let samples = (f64::from(rate) * seconds) as u32;
    let data_len = samples * 2;
    let mut wav = Vec::with_capacity(44 + data_len as usize);
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + data_len).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes());
    wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
    wav.extend_from_slice(&1u16.to_le_bytes()); // mono
    wav.extend_from_slice(&rate.to_le_bytes());
    wav.extend_from_slice(&(rate * 2).to_le_bytes());
    wav.extend_from_slice(&2u16.to_le_bytes());
    wav.extend_from_slice(&16u16.to_le_bytes());
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&data_len.to_le_bytes());
    for i in 0..samples {
        let t = f64::from(i) / f64::from(rate);
        let s = (t * 440.0 * std::f64::consts::TAU).sin() * 12_000.0;
        wav.extend_from_slice(&(s as i16).to_le_bytes());
    }
    wav
}

/// The server on a models file of two entries: `whisper` (alias `whisper-1`), the scripted
/// provider at `url`, and `local`, the embedded model on a file that is never loaded.
async fn server(dir: &Path, url: &str) -> Server {
    let models = dir.join("models.toml");
    std::fs::write(
        &models,
        format!(
            "[[models]]\nname = \"whisper\"\naliases = [\"whisper-1\"]\nbackend = \"provider\"\n\
             url = \"{url}\"\nmodel = \"upstream-audio\"\nretries = 0\n\n\
             [[models]]\nname = \"local\"\nbackend = \"local\"\nmodel_file = {:?}\n\
             preload = false\n",
            dir.join("never-loaded.gguf").display().to_string()
        ),
    )
    .unwrap();
    Server::start(dir, &["--models", models.to_str().unwrap()]).await
}

/// The content parts of the user turn a provider was sent.
fn user_parts(body: &Value) -> &Vec<Value> {
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1, "{body}");
    assert_eq!(messages[0]["role"], "user", "{body}");
    messages[0]["content"].as_array().unwrap()
}

/// An error the SDK raised: a 400 whose OpenAI envelope names `param`.
fn assert_refused(out: &Value, case: &str, param: &str) -> String {
    let e = &out[case];
    assert_eq!(e["class"], "BadRequestError", "{case}: {e}");
    assert_eq!(e["status"], 400, "{case}: {e}");
    assert_eq!(e["body"]["param"], param, "{case}: {e}");
    assert_eq!(e["body"]["type"], "invalid_request_error", "{case}: {e}");
    e["body"]["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_openai_sdk_gets_a_providers_transcription_as_json_text_and_verbose_json() {
    let provider = Scripted::start(vec![Reply::json(
        200,
        &completion(&format!("\n  {ANSWER}  \n")),
    )])
    .await;
    let dir = folder("transcriptions-sdk");
    let server = server(&dir, &provider.url).await;
    let wav = tone(0.25);
    let audio = dir.join("tone.wav");
    std::fs::write(&audio, &wav).unwrap();

    let script = format!(
        "{}/tests/e2e/api/openai_transcribe.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut command = tokio::process::Command::new(sdk_python());
    command
        .arg(&script)
        .args(["--base", &server.url, "--key", TOKEN])
        .args(["--model", "whisper-1", "--local", "local"])
        .args(["--audio", audio.to_str().unwrap(), "--timeout", "60"]);
    let out = run_client(command, "openai_transcribe.py", &server, 180).await;

    let json = ok(&out, "json");
    assert_eq!(json["type"], "Transcription", "{json}");
    assert_eq!(json["text"], ANSWER, "{json}");
    assert_eq!(json["usage"]["type"], "tokens", "{json}");
    assert_eq!(json["usage"]["input_tokens"], 11, "{json}");
    assert_eq!(json["usage"]["output_tokens"], 4, "{json}");
    let text = ok(&out, "text");
    assert_eq!(text["type"], "str", "{text}");
    assert_eq!(text["text"], ANSWER, "{text}");
    let verbose = ok(&out, "verbose_json");
    assert_eq!(verbose["type"], "TranscriptionVerbose", "{verbose}");
    assert_eq!(verbose["text"], ANSWER, "{verbose}");
    assert_eq!(verbose["language"], "en", "{verbose}");
    assert_eq!(verbose["duration"], 0.25, "{verbose}");
    assert_eq!(verbose["object"]["task"], "transcribe", "{verbose}");
    assert_eq!(
        verbose["object"]["usage"],
        json!({"type": "duration", "seconds": 0.25}),
        "{verbose}"
    );
    // No segments are made up: their timestamps and log-probabilities are not known.
    assert_eq!(verbose["segments"], Value::Null, "{verbose}");

    // Each was asked of the provider as a chat completion of the entry's own model: the
    // instruction, then the file's bytes as `input_audio`.
    let seen = provider.seen();
    assert_eq!(seen.len(), 3, "{seen:?}");
    let sent = base64::engine::general_purpose::STANDARD.encode(&wav);
    for (i, request) in seen.iter().enumerate() {
        assert_eq!(request.path, "/v1/chat/completions");
        assert_eq!(request.body["model"], "upstream-audio");
        let parts = user_parts(&request.body);
        assert_eq!(parts.len(), 2, "{}", request.body);
        assert_eq!(parts[0]["type"], "text");
        let instruction = parts[0]["text"].as_str().unwrap();
        assert!(
            instruction.starts_with("Transcribe this audio verbatim"),
            "{instruction}"
        );
        assert_eq!(parts[1]["type"], "input_audio");
        assert_eq!(parts[1]["input_audio"]["format"], "wav");
        assert!(
            parts[1]["input_audio"]["data"] == sent.as_str(),
            "request {i}: the audio sent is not the file's bytes"
        );
        if i == 2 {
            // verbose_json was asked with a language, a prompt and a temperature.
            assert!(instruction.contains("\"en\""), "{instruction}");
            assert!(
                instruction.ends_with("A tone named after Zoë."),
                "{instruction}"
            );
            assert_eq!(request.body["temperature"], 0.0);
        } else {
            assert!(!instruction.contains("ISO-639-1"), "{instruction}");
        }
    }

    // Subtitles, a stream and a model without audio input are refused by the field.
    let message = assert_refused(&out, "srt", "response_format");
    assert!(message.contains("\"srt\" is not supported"), "{message}");
    let message = assert_refused(&out, "stream", "stream");
    assert!(message.contains("not supported"), "{message}");
    let message = assert_refused(&out, "text_only_model", "file");
    assert!(
        message.contains("\"local\" cannot transcribe it")
            && message.contains("has no audio input"),
        "{message}"
    );
    // None of them reached the provider.
    assert_eq!(provider.seen().len(), 3);
    // The calls are counted as transcriptions.
    let metrics = http_client()
        .get(format!("{}/metrics", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            "agent_as_model_requests_total{api=\"transcriptions\",model=\"whisper\",outcome=\"ok\"} 3"
        ),
        "{metrics}"
    );
}

/// One part of a form: its name, file name, content type and bytes.
type FormPart<'a> = (&'a str, Option<&'a str>, Option<&'a str>, &'a [u8]);

/// A `multipart/form-data` body of `parts`, and its content type.
fn form(parts: &[FormPart<'_>]) -> (String, Vec<u8>) {
    let boundary = "aam-test-boundary-7f3a9c";
    let mut body = Vec::new();
    for (name, file, kind, data) in parts {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        let mut disposition = format!("Content-Disposition: form-data; name=\"{name}\"");
        if let Some(file) = file {
            disposition.push_str(&format!("; filename=\"{file}\""));
        }
        body.extend_from_slice(disposition.as_bytes());
        body.extend_from_slice(b"\r\n");
        if let Some(kind) = kind {
            body.extend_from_slice(format!("Content-Type: {kind}\r\n").as_bytes());
        }
        body.extend_from_slice(b"\r\n");
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

async fn send(server: &Server, kind: &str, body: Vec<u8>, token: &str) -> (u16, String, Value) {
    let r = http_client()
        .post(format!("{}/v1/audio/transcriptions", server.url))
        .bearer_auth(token)
        .header("content-type", kind)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let warnings = r
        .headers()
        .get("x-agent-as-model-warnings")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, warnings, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn hostile_forms_are_400s_naming_the_field_and_none_reaches_the_model() {
    let provider = Scripted::start(vec![Reply::json(200, &completion(ANSWER))]).await;
    let dir = folder("transcriptions-hostile");
    let server = server(&dir, &provider.url).await;
    let wav = tone(0.1);
    let audio = ("file", Some("tone.wav"), Some("audio/wav"), wav.as_slice());
    let model = ("model", None, None, &b"whisper-1"[..]);
    let refused = |case: &str, (status, _, body): (u16, String, Value), param: &str| {
        assert_eq!(status, 400, "{case}: {body}");
        assert_eq!(
            body["error"]["type"], "invalid_request_error",
            "{case}: {body}"
        );
        assert_eq!(body["error"]["param"], param, "{case}: {body}");
        body["error"]["message"].as_str().unwrap().to_owned()
    };

    let (kind, body) = form(&[model]);
    let message = refused("no file", send(&server, &kind, body, TOKEN).await, "file");
    assert!(message.contains("is required"), "{message}");
    let (kind, body) = form(&[audio]);
    let message = refused("no model", send(&server, &kind, body, TOKEN).await, "model");
    assert!(message.contains("is required"), "{message}");
    let notes = (
        "file",
        Some("notes.txt"),
        Some("text/plain"),
        &b"Not audio at all.\n"[..],
    );
    let (kind, body) = form(&[notes, model]);
    let message = refused(
        "a text file",
        send(&server, &kind, body, TOKEN).await,
        "file",
    );
    assert!(message.contains("not WAV or MP3 audio"), "{message}");
    // A text file that says it is WAV is refused all the same.
    let liar = (
        "file",
        Some("notes.wav"),
        Some("audio/wav"),
        &b"Not audio at all.\n"[..],
    );
    let (kind, body) = form(&[liar, model]);
    refused(
        "a text file as WAV",
        send(&server, &kind, body, TOKEN).await,
        "file",
    );
    let srt = ("response_format", None, None, &b"srt"[..]);
    let (kind, body) = form(&[audio, model, srt]);
    let message = refused(
        "srt",
        send(&server, &kind, body, TOKEN).await,
        "response_format",
    );
    assert!(
        message.contains("\"json\", \"text\", \"verbose_json\""),
        "{message}"
    );
    let vtt = ("response_format", None, None, &b"vtt"[..]);
    let (kind, body) = form(&[audio, model, vtt]);
    refused(
        "vtt",
        send(&server, &kind, body, TOKEN).await,
        "response_format",
    );
    let hot = ("temperature", None, None, &b"3"[..]);
    let (kind, body) = form(&[audio, model, hot]);
    refused(
        "temperature",
        send(&server, &kind, body, TOKEN).await,
        "temperature",
    );

    // Not a form: a 400 saying what the endpoint takes.
    let (status, _, body) = send(
        &server,
        "application/json",
        json!({"model": "whisper-1", "file": "tone.wav"})
            .to_string()
            .into_bytes(),
        TOKEN,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("multipart/form-data"), "{message}");
    // A form cut short.
    let (kind, mut body) = form(&[audio, model]);
    body.truncate(body.len() / 2);
    let (status, _, body) = send(&server, &kind, body, TOKEN).await;
    assert_eq!(status, 400, "{body}");

    // A model the server does not have: OpenAI's 404 naming `model`.
    let other = ("model", None, None, &b"no-such-model"[..]);
    let (kind, body) = form(&[audio, other]);
    let (status, _, body) = send(&server, &kind, body, TOKEN).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["param"], "model", "{body}");
    // Without the token: a 401 in OpenAI's envelope.
    let (kind, body) = form(&[audio, model]);
    let (status, _, body) = send(&server, &kind, body, "wrong").await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["type"], "authentication_error", "{body}");
    assert!(provider.seen().is_empty(), "{:?}", provider.seen());

    // A good form with a field this server has no use for: answered, the field named in the
    // warnings header.
    let extra = ("colour", None, None, &b"blue"[..]);
    let (kind, body) = form(&[audio, model, extra]);
    let (status, warnings, body) = send(&server, &kind, body, TOKEN).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["text"], ANSWER, "{body}");
    assert!(warnings.contains("unknown field `colour`"), "{warnings}");
    assert_eq!(provider.seen().len(), 1);
}

#[tokio::test]
async fn the_form_is_held_to_the_request_body_limit_and_the_audio_to_the_media_limit() {
    let provider = Scripted::start(vec![Reply::json(200, &completion(ANSWER))]).await;
    let dir = folder("transcriptions-limits");
    let models = dir.join("models.toml");
    std::fs::write(
        &models,
        format!(
            "[[models]]\nname = \"whisper\"\nbackend = \"provider\"\nurl = \"{}\"\n\
             model = \"upstream-audio\"\nretries = 0\n",
            provider.url
        ),
    )
    .unwrap();
    let server = Server::with_env(
        &dir,
        &["--models", models.to_str().unwrap()],
        &[
            ("AGENT_AS_MODEL_MAX_REQUEST_BYTES", "65536"),
            ("AGENT_AS_MODEL_MAX_MEDIA_BYTES", "16384"),
        ],
    )
    .await;
    let model = ("model", None, None, &b"whisper"[..]);
    // Within the body limit (the request limit and 1 MiB for the envelope) but over the media
    // limit: a 400 naming the file.
    let wav = tone(1.0);
    let (kind, body) = form(&[("file", Some("a.wav"), Some("audio/wav"), &wav), model]);
    let (status, _, body) = send(&server, &kind, body, TOKEN).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "file", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("over the limit of 16384 bytes"),
        "{message}"
    );
    // Over the body limit: the 413 every route answers, before the form is read.
    let wav = tone(40.0);
    let (kind, body) = form(&[("file", Some("a.wav"), Some("audio/wav"), &wav), model]);
    let (status, _, _) = send(&server, &kind, body, TOKEN).await;
    assert_eq!(status, 413);
    // A small one is answered.
    let wav = tone(0.2);
    let (kind, body) = form(&[("file", Some("a.wav"), Some("audio/wav"), &wav), model]);
    let (status, _, body) = send(&server, &kind, body, TOKEN).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["text"], ANSWER, "{body}");
    assert_eq!(provider.seen().len(), 1);
}
