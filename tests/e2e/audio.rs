//! Audio on the embedded model (`--mmproj`). No registry this project reaches carries an audio
//! model with its projector, so the projector is built for the default model itself by
//! `tests/data/audio/make_tone_mmproj.py` (`tests/data/audio/tone-mmproj`): an Ultravox-type
//! projector whose "audio tower" tells a low-pitched sound from a high-pitched one in the log-mel
//! spectrogram llama.cpp's whisper preprocessing makes, and hands the model its own embeddings of
//! " low" or " high". The WAVs are a 200 Hz and a 3000 Hz tone. Through the official clients
//! (`tests/data/audio/hear.py`): OpenAI's `/v1/audio/transcriptions`, chat `input_audio`,
//! Responses `input_audio` and Gemini's `inlineData`; the two tones give two answers, each its
//! word. The projector reads audio only: `/api/show` says `audio`, not `vision`, and an image is
//! refused by name.

use crate::http::Replica;
use crate::http_api::{embedded, post};
use serde_json::{Value, json};

const TOKEN: &str = "audio-test-token";

async fn server() -> (tokio::sync::MutexGuard<'static, ()>, Replica) {
    let projector = crate::vision::built("audio/tone-mmproj");
    embedded(&[
        ("AGENT_AS_MODEL_MMPROJ", projector.as_str()),
        ("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN),
    ])
    .await
}

/// What the client heard in `wav` the `way` it asks (see hear.py).
async fn hear(s: &Replica, way: &str, wav: &str) -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/audio");
    let mut command = tokio::process::Command::new(crate::common::sdk_python());
    command.arg(format!("{dir}/hear.py")).args([
        way,
        &s.url,
        TOKEN,
        "local",
        &format!("{dir}/{wav}"),
    ]);
    let v = crate::vision::client_json(command, way).await;
    v["text"].as_str().unwrap_or_default().to_lowercase()
}

#[tokio::test]
async fn a_sound_reaches_the_model_through_every_clients_api_and_the_transcription_endpoint() {
    let (_turn, s) = server().await;
    for way in ["transcribe", "chat", "responses", "genai"] {
        let low = hear(&s, way, "low.wav").await;
        let high = hear(&s, way, "high.wav").await;
        assert!(
            low.contains("low") && !low.contains("high"),
            "{way}: low.wav: {low}"
        );
        assert!(
            high.contains("high") && !high.contains("low"),
            "{way}: high.wav: {high}"
        );
    }
}

#[tokio::test]
async fn an_audio_projector_says_audio_and_refuses_an_image_by_name() {
    let (_turn, s) = server().await;
    let auth = format!("Bearer {TOKEN}");
    let red = crate::vision::data_url("image/png", &crate::vision::file("red.png"));
    let body = crate::vision::chat(json!([{"type": "text", "text": "What colour is this?"}, red]));
    let chat = format!("{}/v1/chat/completions", s.url);
    let (status, _, text) = post(&chat, &[("authorization", auth.as_str())], &body).await;
    assert_eq!(status, 400, "{text}");
    let message = serde_json::from_str::<Value>(&text).unwrap()["error"]["message"].to_string();
    assert!(
        message.contains("image part") && message.contains("no vision"),
        "{message}"
    );
    // Loaded now: what its projector reads.
    let show = json!({"model": "qwen2.5-coder-0.5b-instruct"});
    let (_, _, show) = post(
        &format!("{}/api/show", s.url),
        &[("authorization", auth.as_str())],
        &show,
    )
    .await;
    let show: Value = serde_json::from_str(&show).unwrap();
    let capabilities = show["capabilities"].as_array().unwrap();
    assert!(
        capabilities.contains(&json!("audio")) && !capabilities.contains(&json!("vision")),
        "{show}"
    );
}

#[tokio::test]
async fn before_it_loads_the_model_says_what_its_projectors_file_reads() {
    let projector = crate::vision::built("audio/tone-mmproj");
    let dir = std::env::temp_dir().join(format!("aam-audio-list-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let models = dir.join("models.toml");
    let entry =
        format!("[[models]]\nname = \"local\"\nbackend = \"local\"\nmmproj = \"{projector}\"\n");
    std::fs::write(&models, entry).unwrap();
    // Loaded on its first call (none comes).
    let s = crate::http::start(&[("AGENT_AS_MODEL_MODELS", models.to_str().unwrap())]).await;
    let get = |path: &str| {
        let url = format!("{}{path}", s.url);
        async move {
            let response = crate::common::http_client().get(url).send().await.unwrap();
            response.json::<Value>().await.unwrap()
        }
    };
    let listed = get("/v1/models").await;
    assert_eq!(
        listed["data"][0]["input_modalities"],
        json!(["text", "audio"]),
        "{listed}"
    );
    assert_eq!(get("/api/ps").await["models"], json!([]), "it was loaded");
    let _ = std::fs::remove_dir_all(&dir);
}
