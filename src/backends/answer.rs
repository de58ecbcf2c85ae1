//! A provider's answers as serde types: the chat completion (whole, or as a stream assembled
//! it), its usage and its error bodies, read leniently: a field of another type than expected
//! reads as no value ([`Field`]), unknown fields are ignored.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// A field of a provider's answer as read: absent, or there with a value of the expected type
/// or not (`None`). A value of another type (`null` among them) is read as no value, not as an
/// error: a provider's odd field leaves it unset, as the answer was always read. Where an
/// object belongs ([`Shape::OBJECT`]), anything else is no value (serde would read an array
/// positionally).
#[derive(Debug, Default)]
pub(super) enum Field<T> {
    #[default]
    Absent,
    Present(Option<T>),
}

/// Whether a type read through a [`Field`] is a JSON object.
pub(super) trait Shape {
    const OBJECT: bool = true;
}

impl Shape for String {
    const OBJECT: bool = false;
}
impl Shape for u64 {
    const OBJECT: bool = false;
}
impl Shape for f64 {
    const OBJECT: bool = false;
}
impl Shape for u8 {
    const OBJECT: bool = false;
}
impl Shape for Value {
    const OBJECT: bool = false;
}
impl<T> Shape for Vec<T> {
    const OBJECT: bool = false;
}
impl Shape for Arguments {
    const OBJECT: bool = false;
}

impl<T> Field<T> {
    pub(super) fn get(&self) -> Option<&T> {
        match self {
            Field::Present(Some(value)) => Some(value),
            _ => None,
        }
    }

    pub(super) fn into_option(self) -> Option<T> {
        match self {
            Field::Present(value) => value,
            Field::Absent => None,
        }
    }

    pub(super) fn is_absent(&self) -> bool {
        matches!(self, Field::Absent)
    }
}

impl<T: DeserializeOwned + Shape> Field<T> {
    /// `value` read as a `T`, if it is one.
    pub(super) fn read(value: &Value) -> Option<T> {
        if T::OBJECT && !value.is_object() {
            return None;
        }
        T::deserialize(value).ok()
    }

    /// The same, moving the value's strings instead of copying them.
    pub(super) fn take(value: Value) -> Option<T> {
        if T::OBJECT && !value.is_object() {
            return None;
        }
        T::deserialize(value).ok()
    }
}

impl<'de, T: DeserializeOwned + Shape> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(|value| Field::Present(Field::take(value)))
    }
}

impl<T: Serialize> Serialize for Field<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.get().serialize(serializer)
    }
}

/// A chat completion as the provider answered it (or as a stream was assembled into); unknown
/// fields are ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ChatCompletion {
    pub(super) model: Field<String>,
    pub(super) choices: Field<Vec<Field<Choice>>>,
    pub(super) usage: Field<UsageCounts>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Choice {
    pub(super) message: Field<AnswerMessage>,
    pub(super) finish_reason: Field<String>,
    pub(super) logprobs: Field<ChoiceLogprobs>,
}

/// A choice's `logprobs` (asked for with `logprobs: true`): its content's tokens.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ChoiceLogprobs {
    pub(super) content: Field<Vec<Field<TokenEntry>>>,
}

/// One token of `logprobs.content`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct TokenEntry {
    pub(super) token: Field<String>,
    pub(super) logprob: Field<f64>,
    pub(super) bytes: Field<Vec<u8>>,
    pub(super) top_logprobs: Field<Vec<Field<TokenEntry>>>,
}

impl ChoiceLogprobs {
    /// The tokens, when the choice has a list of them (entries that are not objects are
    /// skipped; a token without a log-probability reads as impossible, without bytes as its
    /// text's).
    pub(super) fn tokens(self) -> Option<Vec<crate::call::TokenLogprob>> {
        let content = self.content.into_option()?;
        Some(
            (content.into_iter())
                .filter_map(Field::into_option)
                .map(TokenEntry::told)
                .collect(),
        )
    }

    /// The tokens of a choice's `logprobs` as the provider wrote them.
    pub(super) fn of(value: &Value) -> Option<Vec<crate::call::TokenLogprob>> {
        Field::<ChoiceLogprobs>::read(value).and_then(ChoiceLogprobs::tokens)
    }
}

impl TokenEntry {
    fn parts(self) -> (String, Vec<u8>, f64) {
        let token = self.token.into_option().unwrap_or_default();
        let bytes = (self.bytes.into_option()).unwrap_or_else(|| token.as_bytes().to_vec());
        let logprob = self.logprob.into_option().unwrap_or(f64::NEG_INFINITY);
        (token, bytes, logprob)
    }

    fn told(mut self) -> crate::call::TokenLogprob {
        let top = std::mem::take(&mut self.top_logprobs);
        let (token, bytes, logprob) = self.parts();
        crate::call::TokenLogprob {
            token,
            bytes,
            logprob,
            top: (top.into_option().unwrap_or_default().into_iter())
                .filter_map(Field::into_option)
                .map(|t| {
                    let (token, bytes, logprob) = t.parts();
                    crate::call::TopLogprob {
                        token,
                        bytes,
                        logprob,
                    }
                })
                .collect(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct AnswerMessage {
    pub(super) content: Field<String>,
    /// The model's reasoning, as llama-server, vLLM and DeepSeek name it …
    pub(super) reasoning_content: Field<String>,
    /// … and as OpenRouter and newer vLLM do.
    pub(super) reasoning: Field<String>,
    pub(super) tool_calls: Field<Vec<Field<AnswerCall>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct AnswerCall {
    pub(super) id: Field<String>,
    pub(super) function: Field<AnswerFunction>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct AnswerFunction {
    pub(super) name: Field<String>,
    pub(super) arguments: Field<Arguments>,
}

/// A tool call's arguments: JSON text, as the API says, or an object, as some providers send.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum Arguments {
    Text(String),
    Object(Map<String, Value>),
}

/// The token counts of an answer (or of a stream's last chunk).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub(super) struct UsageCounts {
    #[serde(skip_serializing_if = "Field::is_absent")]
    pub(super) prompt_tokens: Field<u64>,
    #[serde(skip_serializing_if = "Field::is_absent")]
    pub(super) completion_tokens: Field<u64>,
    /// How many of the prompt's tokens the provider had cached, when it says.
    #[serde(skip_serializing_if = "Field::is_absent")]
    pub(super) prompt_tokens_details: Field<PromptDetails>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub(super) struct PromptDetails {
    #[serde(skip_serializing_if = "Field::is_absent")]
    pub(super) cached_tokens: Field<u64>,
}

/// An error answer: `{"error": {"message": …}}`, `{"error": "…"}` or `{"message": "…"}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ErrorAnswer {
    pub(super) error: Field<Value>,
    pub(super) message: Field<String>,
}

/// An OpenAI error object, `{"message": …}` among its fields.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ErrorObject {
    pub(super) message: Field<String>,
}

impl UsageCounts {
    /// `prompt_tokens_details.cached_tokens`, when the provider says.
    pub(super) fn cached_tokens(&self) -> Option<usize> {
        let details = self.prompt_tokens_details.get()?;
        details
            .cached_tokens
            .get()
            .and_then(|n| usize::try_from(*n).ok())
    }
}

impl ErrorObject {
    /// The message of `error` when it is an error object with one as text.
    pub(super) fn message(error: &Value) -> Option<String> {
        Field::<ErrorObject>::read(error).and_then(|e| e.message.into_option())
    }
}

impl Shape for ChatCompletion {}
impl Shape for Choice {}
impl Shape for ChoiceLogprobs {}
impl Shape for TokenEntry {}
impl Shape for AnswerMessage {}
impl Shape for AnswerCall {}
impl Shape for AnswerFunction {}
impl Shape for UsageCounts {}
impl Shape for PromptDetails {}
impl Shape for ErrorAnswer {}
impl Shape for ErrorObject {}
