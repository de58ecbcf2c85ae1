//! Grammars (llguidance's Lark) for each family's calls.
