//! Errors about a module's arguments: the args file itself, or values that do not fit the spec.

use std::fmt;

/// What was wrong with the arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ArgsErrorKind {
    /// The args file is missing, unreadable or not a JSON object.
    ArgsFile,
    /// An `_ansible_*` key has a value of the wrong type.
    Internal,
    /// Options that are not in the spec.
    Unsupported,
    /// A `mutually_exclusive` group has more than one member set.
    MutuallyExclusive,
    /// Required options are missing.
    Missing,
    /// A value could not be converted to its option's type.
    Type,
    /// A value is not one of its option's choices.
    Choices,
    /// A `required_together` group is partly set.
    RequiredTogether,
    /// No member of a `required_one_of` group is set.
    RequiredOneOf,
    /// A `required_if` condition holds but its requirements are missing.
    RequiredIf,
    /// A `required_by` option is set but its requirements are missing.
    RequiredBy,
    /// The module's own spec is inconsistent (a bug in the module).
    InvalidSpec,
}

/// An argument error, with the message `AnsibleModule` would give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgsError {
    kind: ArgsErrorKind,
    msg: String,
}

impl ArgsError {
    pub(crate) fn new(kind: ArgsErrorKind, msg: impl Into<String>) -> ArgsError {
        ArgsError {
            kind,
            msg: msg.into(),
        }
    }

    /// What was wrong.
    pub fn kind(&self) -> ArgsErrorKind {
        self.kind
    }

    /// The message for the user.
    pub fn msg(&self) -> &str {
        &self.msg
    }
}

impl fmt::Display for ArgsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for ArgsError {}
