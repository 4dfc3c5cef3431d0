//! One error type for the whole core. The binding maps it to the Python exception classes
//! of `contextfold.errors`, so both backends raise the same classes with the same text.

use std::fmt;

/// Deepest nesting followed (in content, and in a request body) before
/// [`Problem::TooDeep`]: the walks are iterative, and the bound also stops circular lists.
pub const MAX_DEPTH: usize = 100_000;

/// What was wrong with a message field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The value had the wrong type: `expected` names what is accepted, `got` the type seen.
    WrongType { expected: &'static str, got: String },
    /// A required field was absent.
    Missing,
    /// Nested content went deeper than [`MAX_DEPTH`] (or was circular).
    TooDeep,
}

/// [`CoreError::message_changed`]'s text.
pub const MESSAGE_CHANGED: &str = "a message changed while it was being packed: its edits no longer apply";

/// An error from the core, naming the message index and field where one applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreError {
    /// A message, or one of its fields, is malformed (a `TypeError` in Python, except
    /// [`Problem::TooDeep`], which is a `ValueError`).
    Message { index: Option<usize>, field: &'static str, problem: Problem },
    /// A separate system prompt or the tool definitions are malformed (raised as a
    /// message error is): `field` names the argument (`system`, `instructions`, `tools`),
    /// `index` the tool.
    Prompt { field: &'static str, index: Option<usize>, problem: Problem },
    /// An argument other than a message is invalid (a `ValueError` in Python).
    Argument(String),
    /// A caller-supplied callback failed; the binding keeps the original exception.
    /// `malformed`: the caller's side found a message malformed as it sized it, which
    /// packing takes as it takes a [`CoreError::Message`].
    Callback { malformed: bool },
    /// A state the core's own logic rules out (a bug if ever seen), named for the report.
    Internal(&'static str),
}

impl CoreError {
    /// A malformed message field.
    #[cold]
    pub fn field(index: Option<usize>, field: &'static str, problem: Problem) -> Self {
        CoreError::Message { index, field, problem }
    }

    /// A wrong type in a message field.
    #[cold]
    pub fn wrong_type(field: &'static str, expected: &'static str, got: impl Into<String>) -> Self {
        CoreError::Message { index: None, field, problem: Problem::WrongType { expected, got: got.into() } }
    }

    /// An invalid argument.
    #[cold]
    pub fn argument(text: impl Into<String>) -> Self {
        CoreError::Argument(text.into())
    }

    /// A message that Python code run during the call (an estimator, a key's `__eq__`)
    /// changed so that the edits planned for it no longer fit it.
    #[cold]
    pub fn message_changed() -> Self {
        CoreError::Argument(MESSAGE_CHANGED.into())
    }

    /// An impossible state, reported instead of a panic.
    #[cold]
    pub fn internal(what: &'static str) -> Self {
        CoreError::Internal(what)
    }

    /// This error of sizing a separate system prompt or the tool definitions (each read as
    /// a system message's content) named by that argument (`field`): no message is at
    /// fault.
    #[cold]
    #[must_use]
    pub fn in_prompt(self, field: &'static str) -> Self {
        match self {
            CoreError::Message { index: None, field: "content", problem } => {
                CoreError::Prompt { field, index: None, problem }
            }
            other => other,
        }
    }

    /// The same error, attributed to message `index` when it names no message yet.
    #[must_use]
    pub fn at(self, at: usize) -> Self {
        match self {
            CoreError::Message { index: None, field, problem } => {
                CoreError::Message { index: Some(at), field, problem }
            }
            other => other,
        }
    }
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoreError::Message { index, field, problem } => {
                match index {
                    Some(i) => write!(f, "message {i}")?,
                    None => write!(f, "message")?,
                }
                if !field.is_empty() {
                    write!(f, ", field '{field}'")?;
                }
                write!(f, ": {problem}")
            }
            CoreError::Prompt { field, index: Some(i), problem } => write!(f, "{field}[{i}]: {problem}"),
            CoreError::Prompt { field, index: None, problem } => write!(f, "{field}: {problem}"),
            CoreError::Argument(text) => f.write_str(text),
            CoreError::Callback { .. } => f.write_str("a callback raised"),
            CoreError::Internal(what) => write!(f, "internal error in contextfold: {what} (please report it)"),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::WrongType { expected, got } => write!(f, "expected {expected}, got {got}"),
            Problem::Missing => f.write_str("missing"),
            Problem::TooDeep => write!(f, "nested deeper than {MAX_DEPTH} levels (or circular)"),
        }
    }
}

impl std::error::Error for CoreError {}
