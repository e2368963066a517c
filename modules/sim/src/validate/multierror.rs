//! github.com/hashicorp/go-multierror v1.1.1, as Talos aggregates validation errors:
//! `Append` flattens another `*multierror.Error` into its list (and skips nil errors), while an
//! error that merely wraps one (`fmt.Errorf("v1alpha1.Config: %w", err)`) stays one entry whose
//! text holds the whole inner list. `ListFormatFunc` (format.go) prints `1 error occurred:` or
//! `N errors occurred:`, each entry as `\n\t* <text>`, then `\n\n`.

/// One error: a plain text, or a list (a `*multierror.Error`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GoError {
    Text(String),
    List(Vec<GoError>),
}

impl GoError {
    pub fn text(&self) -> String {
        match self {
            GoError::Text(s) => s.clone(),
            GoError::List(items) => format_list(items),
        }
    }

    /// `fmt.Errorf("<prefix>: %w", err)`: a plain error whose text includes the inner one.
    pub fn wrap(self, prefix: &str) -> GoError {
        GoError::Text(format!("{prefix}: {}", self.text()))
    }
}

impl From<String> for GoError {
    fn from(s: String) -> GoError {
        GoError::Text(s)
    }
}

impl From<&str> for GoError {
    fn from(s: &str) -> GoError {
        GoError::Text(s.to_string())
    }
}

fn format_list(items: &[GoError]) -> String {
    let noun = if items.len() == 1 {
        "1 error occurred"
    } else {
        return format!("{} errors occurred:{}\n\n", items.len(), entries(items));
    };
    format!("{noun}:{}\n\n", entries(items))
}

fn entries(items: &[GoError]) -> String {
    items
        .iter()
        .map(|e| format!("\n\t* {}", e.text()))
        .collect()
}

/// A `*multierror.Error` being built; `None` until something is appended (`ErrorOrNil`).
#[derive(Default, Debug)]
pub struct Errors(Vec<GoError>);

impl Errors {
    /// `multierror.Append(result, err)`.
    pub fn push(&mut self, e: impl Into<GoError>) {
        match e.into() {
            GoError::List(items) => self.0.extend(items),
            other => self.0.push(other),
        }
    }

    /// `multierror.Append(result, err)` for an error that may be nil.
    pub fn append(&mut self, e: Option<GoError>) {
        if let Some(e) = e {
            self.push(e);
        }
    }

    /// `result.ErrorOrNil()`.
    pub fn or_nil(self) -> Option<GoError> {
        if self.0.is_empty() {
            None
        } else {
            Some(GoError::List(self.0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// go-multierror's format.go and append.go: a wrapped list stays one entry.
    #[test]
    fn nested_lists_print_like_go() {
        let mut inner = Errors::default();
        inner.push("a");
        inner.push("b");
        let mut outer = Errors::default();
        outer.push(inner.or_nil().unwrap().wrap("v1alpha1.Config"));
        assert_eq!(
            outer.or_nil().unwrap().text(),
            "1 error occurred:\n\t* v1alpha1.Config: 2 errors occurred:\n\t* a\n\t* b\n\n\n\n"
        );
        let mut flat = Errors::default();
        let mut two = Errors::default();
        two.push("x");
        two.push("y");
        flat.append(two.or_nil());
        flat.append(None);
        assert_eq!(
            flat.or_nil().unwrap().text(),
            "2 errors occurred:\n\t* x\n\t* y\n\n"
        );
    }
}
