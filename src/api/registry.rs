//! The one registry of the APIs this server speaks: each is a [`Wire`](super::dialect::Wire) of
//! its own module, listed here once. The router, the API whose envelope a request no route
//! answers gets, and whose model list `GET /v1/models` returns are derived from it; adding an
//! API is its module and one line of [`ALL`].

use super::dialect::Dialect;

/// Every API this server speaks. The order is the order [`of_path`] asks them in; the last is
/// the API of any other path.
pub const ALL: &[Dialect] = &[
    super::ollama::CHAT,
    super::ollama::GENERATE,
    super::messages::DIALECT,
    super::gemini::DIALECT,
    super::responses::DIALECT,
    super::completions::DIALECT,
    super::chat::DIALECT,
];

/// The APIs whose objects the MCP tools of the same shapes return: a tool's structured result
/// is the object its API's encoder writes ([`for_tool`]).
pub const TOOLS: &[Dialect] = &[
    super::chat::DIALECT,
    super::messages::DIALECT,
    super::responses::DIALECT,
    super::gemini::DIALECT,
];

/// The API whose object the MCP tool `tool` returns; `None` for a tool of no API (`generate`).
pub fn for_tool(tool: &str) -> Option<Dialect> {
    TOOLS.iter().find(|d| d.shape().name() == tool).copied()
}

/// The APIs by the names they had as an enum.
#[allow(non_upper_case_globals)]
impl Dialect {
    /// `POST /v1/chat/completions`.
    pub const Chat: Dialect = super::chat::DIALECT;
    /// `POST /v1/responses`.
    pub const Responses: Dialect = super::responses::DIALECT;
    /// `POST /v1/messages`.
    pub const Messages: Dialect = super::messages::DIALECT;
    /// `POST /v1beta/models/{model}:generateContent` (and `/v1/models/…`).
    pub const Gemini: Dialect = super::gemini::DIALECT;
    /// `POST /v1/completions`: OpenAI's legacy text completions.
    pub const Completions: Dialect = super::completions::DIALECT;
    /// Ollama's `POST /api/chat`.
    pub const OllamaChat: Dialect = super::ollama::CHAT;
    /// Ollama's `POST /api/generate`.
    pub const OllamaGenerate: Dialect = super::ollama::GENERATE;
}

/// The API of `path` in `registry` (its last entry when none claims it), for the error of a
/// request no route answers; `GET /v1/models` by the headers `has` says the request carries.
pub fn of_path(registry: &[Dialect], path: &str, has: &dyn Fn(&str) -> bool) -> Option<Dialect> {
    if let Some(claimed) = registry.iter().find(|d| d.claims(path)) {
        return Some(*claimed);
    }
    if path.starts_with("/v1/models") {
        return Some(for_model_list(registry, has));
    }
    registry.last().copied()
}

/// Whose model list a `GET /v1/models` wants: the first API in `registry` whose headers the
/// request carries, else the last (OpenAI's).
pub fn for_model_list(registry: &[Dialect], has: &dyn Fn(&str) -> bool) -> Dialect {
    registry
        .iter()
        .find(|d| d.lists_models_for(has))
        .or(registry.last())
        .copied()
        .unwrap_or(super::chat::DIALECT)
}
