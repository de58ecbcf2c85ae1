//! Wire formats this server speaks as a client or renders for a model, as serde types and the
//! one conversion each between them and the neutral [`crate::call`] types: [`openai`] chat
//! messages (a provider's requests and answers, a chat template's context) and [`media`]: inline images and
//! audio, checked the same wherever they arrive (a caller's request, a host's answer).

pub mod media;
pub mod openai;
