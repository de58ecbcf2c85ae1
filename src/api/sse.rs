//! Server-sent event frames, and the clock the API objects are stamped with.

use serde::Serialize;

/// One server-sent event, as its text: `event:` when named, then the data as JSON.
pub fn frame(event: Option<&str>, data: &impl Serialize) -> String {
    let data = serde_json::to_string(data).unwrap_or_default();
    match event {
        Some(name) => format!("event: {name}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The answer's text (a JSON answer as the tools write it) and its tool calls.
pub fn text_and_calls(answer: &crate::call::Answer) -> (String, &[crate::call::ToolCall]) {
    use crate::call::Answer;
    match answer {
        Answer::Text(t) => (t.clone(), &[]),
        Answer::Json(v) => (crate::pyjson::dumps(v, crate::pyjson::Style::SORTED), &[]),
        Answer::ToolCalls { text, calls } => (text.clone(), calls.as_slice()),
    }
}

/// What the encoders' tests share: an answer, the pieces a backend streams it in, and the
/// events' data.
#[cfg(test)]
pub mod tests_support {
    use crate::call::{Answer, Finish, ToolCall, Usage};
    use crate::fulfil::written::Piece;
    use crate::service::{Answered, Finished};
    use serde_json::{Map, Value, json};

    /// The answer "Sure." and a call of `get_weather` for Paris, as `finish` ended it.
    pub fn answered(answer: Answer, finish: Finish) -> Answered {
        Answered {
            cursor: None,
            report: Default::default(),
            media: Vec::new(),
            finished: Finished {
                answer,
                finish,
                usage: Usage {
                    prompt: 12,
                    completion: 7,
                    estimated: false,
                    cached: Some(4),
                },
                model: "backend-model".into(),
                reasoning: None,
                logprobs: None,
            },
        }
    }

    pub fn weather_call() -> ToolCall {
        let mut input = Map::new();
        input.insert("city".into(), json!("Paris"));
        ToolCall {
            id: "call_1".into(),
            name: "get_weather".into(),
            input,
        }
    }

    /// "Sure." then the call, as an answer.
    pub fn text_and_call() -> Answer {
        Answer::ToolCalls {
            text: "Sure.".into(),
            calls: vec![weather_call()],
        }
    }

    /// The pieces a backend streams [`text_and_call`] in: the text, the call's start and
    /// its arguments in three fragments.
    pub fn pieces() -> Vec<Piece> {
        let mut p = vec![
            Piece::Text("Sure.".into()),
            Piece::CallStart {
                index: 0,
                id: "call_1".into(),
                name: "get_weather".into(),
            },
        ];
        p.extend(["{\"city\"", ": \"Par", "is\"}"].map(|f| Piece::CallArgs {
            index: 0,
            fragment: f.into(),
        }));
        p
    }

    /// [`pieces`] after the model's reasoning, "Think.", in two pieces; and the answer with it.
    pub fn reasoned(mut answered: Answered) -> (Vec<Piece>, Answered) {
        answered.finished.reasoning = Some("Think.".into());
        let mut p = vec![
            Piece::Reasoning("Thi".into()),
            Piece::Reasoning("nk.".into()),
        ];
        p.extend(pieces());
        (p, answered)
    }

    /// A token's log-probability as a backend tells it: -0.5, with itself and `"x"` as the
    /// likeliest at its place.
    pub fn told(token: &str) -> crate::call::TokenLogprob {
        let top = |t: &str, logprob: f64| crate::call::TopLogprob {
            token: t.into(),
            bytes: t.as_bytes().to_vec(),
            logprob,
        };
        crate::call::TokenLogprob {
            token: token.into(),
            bytes: token.as_bytes().to_vec(),
            logprob: -0.5,
            top: vec![top(token, -0.5), top("x", -1.5)],
        }
    }

    /// "Hello Ex" as three tokens told and streamed, a stop sequence `END` holding the "E"
    /// back for a while; the answer with their log-probabilities.
    pub fn told_pieces(mut answered: Answered) -> (Vec<Piece>, Answered) {
        let tokens = ["Hello", " E", "x"];
        answered.finished.answer = Answer::Text(tokens.concat());
        answered.finished.logprobs = Some(tokens.iter().map(|t| told(t)).collect());
        let pieces = tokens
            .iter()
            .flat_map(|t| [Piece::Logprobs(vec![told(t)]), Piece::Text((*t).into())])
            .collect();
        (pieces, answered)
    }

    /// The `data:` payloads of frames.
    pub fn data(frames: &[String]) -> Vec<Value> {
        frames
            .iter()
            .filter_map(|f| f.lines().find_map(|l| l.strip_prefix("data: ")))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap_or(Value::Null))
            .collect()
    }

    /// Runs an encoder over `pieces` and `answered`: every frame's data.
    pub fn run(
        encoder: &mut dyn super::super::Encode,
        pieces: Vec<Piece>,
        answered: &Answered,
    ) -> Vec<Value> {
        let mut frames = encoder.start();
        for piece in pieces {
            frames.extend(encoder.piece(piece));
        }
        frames.extend(encoder.finish(answered));
        data(&frames)
    }
}
