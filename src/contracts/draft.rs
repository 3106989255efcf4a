//! The JSON Schema drafts a contract may be written in: what the load-time
//! check (`vocabulary`) and the exact number keywords (`exact`) both go by,
//! kept apart so that neither imports the other for it.

/// The JSON Schema drafts a contract may be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Draft {
    Draft4,
    Draft6,
    Draft7,
    Draft201909,
    Draft202012,
}
