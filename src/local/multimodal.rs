//! A prompt with images and audio in it: the chat template renders each media part as a marker
//! ([`openai::media_marker`]); the text between the markers is tokenized as any prompt's, and
//! each media part is decoded (bounded: [`super::media`]) and read by the model's projector
//! into chunks that stand in the prompt as tokens of their own, made from the part's content
//! ([`slots::media_tokens`]), so the prefix cache and the prompt cache on disk match an image a
//! second turn repeats, and do not match another.

use super::RequestError;
use super::engine::Model;
use super::media;
use super::projector::Projector;
use super::slots::{self, Media};
use crate::backends::direct::ModelRequest;
use crate::call::Block;
use crate::error::CallError;
use crate::limits::Limits;
use crate::wire::{media as wire_media, openai};
use llama_cpp_2::token::LlamaToken;
use std::sync::Arc;

/// One media part of a request: where it is (its turn, its kind), its data (base64) and the
/// SHA-256 of its bytes.
struct Part<'r> {
    turn: usize,
    kind: &'static str,
    data: &'r str,
    sha256: &'r [u8; 32],
}

impl Part<'_> {
    /// The part as errors name it.
    fn named(&self) -> String {
        format!("messages[{}] ({} part)", self.turn, self.kind)
    }
}

/// The image and audio parts of the turns, in the order the template renders their markers
/// (a tool result's media is not rendered: its text is).
fn parts(request: &ModelRequest) -> Vec<Part<'_>> {
    let turns = request.base.turns.iter().enumerate();
    turns
        .flat_map(|(turn, t)| t.blocks.iter().map(move |b| (turn, b)))
        .filter_map(|(turn, block)| {
            let (kind, data, sha256) = match block {
                Block::Image { data, sha256, .. } => ("image", data, sha256),
                Block::Audio { data, sha256, .. } => ("audio", data, sha256),
                _ => return None,
            };
            Some(Part {
                turn,
                kind,
                data,
                sha256,
            })
        })
        .collect()
}

/// Whether a request holds images or audio the model is to read.
pub fn has_media(request: &ModelRequest) -> bool {
    request.base.text.is_none() && !parts(request).is_empty()
}

/// Refuses media a model without a projector was sent, naming the first part: `name` is the
/// model as callers know it.
pub fn no_projector(request: &ModelRequest, name: &str) -> Result<(), CallError> {
    match parts(request).first() {
        Some(part) => Err(CallError::at(
            &part.named(),
            no_projector_problem(name, Some(part)),
        )),
        None => Ok(()),
    }
}

fn sense(kind: &str) -> &'static str {
    if kind == "audio" {
        "audio input"
    } else {
        "vision"
    }
}

/// The prompt's tokens and the media in it, from the `text` its template rendered for
/// `request`, the media read by `model`'s projector.
pub fn prompt(
    model: &Model,
    text: &str,
    request: &ModelRequest,
    limits: &Limits,
) -> Result<(Vec<LlamaToken>, Vec<Media>), RequestError> {
    let parts = parts(request);
    media::count_parts(parts.len(), "messages", limits).map_err(refused)?;
    let projector = projector(model, &parts)?;
    let texts: Vec<&str> = text.split(openai::media_marker()).collect();
    if texts.len() != parts.len() + 1 {
        return Err(RequestError::Media {
            part: "messages".to_owned(),
            problem: format!(
                "the chat template rendered {} of the {} image and audio parts; send them in \
                 user turns",
                texts.len().saturating_sub(1),
                parts.len()
            ),
        });
    }
    let mut tokens = Vec::new();
    let mut spans = Vec::with_capacity(parts.len());
    for (i, piece) in texts.iter().enumerate() {
        tokens.extend(match i {
            0 => model.tokenize(piece),
            _ => model.tokens_of(piece),
        });
        let Some(part) = parts.get(i) else {
            continue;
        };
        let chunks = read(projector, part, limits)?;
        let len = usize::try_from(chunks.total_positions()).unwrap_or(0);
        spans.push(Media {
            start: tokens.len(),
            len,
            cells: chunks.total_tokens().max(len),
            chunks: Some(Arc::new(chunks)),
        });
        tokens.extend(slots::media_tokens(part.sha256, len));
    }
    // A prompt with no template after its last part (a base model's, joined as plain text):
    // the answer starts after a paragraph break, as plain text joins the turns, for it needs a
    // token of text to start from.
    if (spans.last()).is_some_and(|m| m.start + m.len == tokens.len()) {
        tokens.extend(model.tokens_of("\n\n"));
    }
    Ok((tokens, spans))
}

/// The model's projector, when it reads every kind of media in `parts`.
fn projector<'m>(model: &'m Model, parts: &[Part<'_>]) -> Result<&'m Projector, RequestError> {
    let first = parts.first();
    let named = || first.map_or_else(|| "messages".to_owned(), Part::named);
    let projector = match model.projector_state() {
        None => {
            let problem = no_projector_problem(&model.info().name, first);
            return Err(RequestError::Media {
                part: named(),
                problem,
            });
        }
        Some(Err(why)) => {
            return Err(RequestError::Media {
                part: named(),
                problem: format!("the local model's projector did not load ({why})"),
            });
        }
        Some(Ok(projector)) => projector,
    };
    let missing = parts.iter().find(|p| match p.kind {
        "audio" => projector.audio_rate().is_none(),
        _ => !projector.vision(),
    });
    match missing {
        Some(part) => Err(RequestError::Media {
            part: part.named(),
            problem: format!(
                "the local model {} has no {}: its projector reads {}",
                model.info().name,
                sense(part.kind),
                if projector.vision() {
                    "images only"
                } else {
                    "audio only"
                }
            ),
        }),
        None => Ok(projector),
    }
}

fn no_projector_problem(name: &str, first: Option<&Part<'_>>) -> String {
    format!(
        "the local model {name} has no {}: it was started without a projector (--mmproj, or \
         a models file entry's `mmproj`); send text only, or give it its projector",
        sense(first.map_or("image", |p| p.kind))
    )
}

/// Decodes one part, bounded, and reads it with the projector into chunks (llama.cpp knows
/// them by the part's digest).
fn read(
    projector: &Projector,
    part: &Part<'_>,
    limits: &Limits,
) -> Result<llama_cpp_2::mtmd::MtmdInputChunks, RequestError> {
    let named = part.named();
    let bytes = wire_media::decode(part.data, &named, limits).map_err(refused)?;
    let id = hex::encode(part.sha256);
    let chunks = match (part.kind, projector.audio_rate()) {
        ("audio", Some(rate)) => {
            let samples = media::audio(&bytes, rate, &named, limits).map_err(refused)?;
            projector.audio(&samples, &id)
        }
        _ => {
            let pixels = media::image(&bytes, &named, limits).map_err(refused)?;
            projector.image(pixels.width, pixels.height, &pixels.rgb, &id)
        }
    };
    chunks.map_err(|e| RequestError::Media {
        part: named,
        problem: e.to_string(),
    })
}

/// A media part's refusal as the request's.
fn refused(e: CallError) -> RequestError {
    match e {
        CallError::Argument { path, problem } => RequestError::Media {
            part: path,
            problem,
        },
        other => RequestError::Media {
            part: "messages".to_owned(),
            problem: other.to_string(),
        },
    }
}
