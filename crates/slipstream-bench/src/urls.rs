//! Parsing of weighted URL lists: one `weight path` or `path` per line.

use http::uri::PathAndQuery;

/// Why a URL list could not be parsed. Every variant names the source and the
/// 1-based line so the user can fix the file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UrlListError {
    /// The first of two fields is not a finite, non-negative number.
    #[error("{source_name}:{line}: bad weight `{text}` (expected a non-negative number)")]
    BadWeight {
        /// Name of the list (usually its file name).
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// The offending field.
        text: String,
    },
    /// The path does not start with `/` or is not a valid path and query.
    #[error("{source_name}:{line}: bad path `{text}` (expected e.g. `/index.html?x=1`)")]
    BadPath {
        /// Name of the list.
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// The offending field.
        text: String,
    },
    /// The line has more than two whitespace-separated fields.
    #[error("{source_name}:{line}: expected `weight path` or `path`, found {fields} fields")]
    TooManyFields {
        /// Name of the list.
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// How many fields the line has.
        fields: usize,
    },
    /// The list has no entries besides comments and blank lines.
    #[error("{source_name}: no URLs in list")]
    Empty {
        /// Name of the list.
        source_name: String,
    },
}

/// Parses a URL list into `(path+query, weight)` pairs.
///
/// Each non-blank line is either `weight<TAB or spaces>path` or just `path`
/// (weight 1). Lines whose first non-blank character is `#` are comments.
pub fn parse_url_list(text: &str, source_name: &str) -> Result<Vec<(String, f64)>, UrlListError> {
    let mut out = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = trimmed.split_whitespace().collect();
        let (weight, path) = match fields.as_slice() {
            [path] => (1.0, *path),
            [weight, path] => (parse_weight(weight, source_name, line)?, *path),
            _ => {
                return Err(UrlListError::TooManyFields {
                    source_name: source_name.to_owned(),
                    line,
                    fields: fields.len(),
                })
            }
        };
        if !path.starts_with('/') || PathAndQuery::try_from(path).is_err() {
            return Err(UrlListError::BadPath {
                source_name: source_name.to_owned(),
                line,
                text: path.to_owned(),
            });
        }
        out.push((path.to_owned(), weight));
    }
    if out.is_empty() {
        return Err(UrlListError::Empty {
            source_name: source_name.to_owned(),
        });
    }
    Ok(out)
}

fn parse_weight(text: &str, source_name: &str, line: usize) -> Result<f64, UrlListError> {
    match text.parse::<f64>() {
        Ok(w) if w.is_finite() && w >= 0.0 => Ok(w),
        _ => Err(UrlListError::BadWeight {
            source_name: source_name.to_owned(),
            line,
            text: text.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_default_to_one_and_comments_are_skipped() {
        let text = "# header\n\n3\t/a\n/b?x=1\n  0.5   /c  \n";
        let list = parse_url_list(text, "list.txt").unwrap();
        assert_eq!(
            list,
            vec![
                ("/a".to_owned(), 3.0),
                ("/b?x=1".to_owned(), 1.0),
                ("/c".to_owned(), 0.5)
            ]
        );
    }

    #[test]
    fn errors_name_source_and_line() {
        let err = parse_url_list("/a\n# c\nxx /b\n", "urls.txt").unwrap_err();
        assert_eq!(
            err.to_string(),
            "urls.txt:3: bad weight `xx` (expected a non-negative number)"
        );
        let err = parse_url_list("-1 /a", "u").unwrap_err();
        assert!(matches!(err, UrlListError::BadWeight { line: 1, .. }));
        let err = parse_url_list("1 a", "u").unwrap_err();
        assert!(matches!(err, UrlListError::BadPath { line: 1, .. }));
        let err = parse_url_list("1 /a /b", "u").unwrap_err();
        assert!(matches!(err, UrlListError::TooManyFields { fields: 3, .. }));
        let err = parse_url_list("# only\n", "u").unwrap_err();
        assert!(matches!(err, UrlListError::Empty { .. }));
    }
}
