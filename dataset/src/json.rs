//! The JSON form of a [`DatasetDef`], what the CLI reads (`docs/dataset-spec.md`).
//!
//! The form is exactly the serde derives on the definition types; this module only
//! adds error reporting a person can act on: every error names the path of the
//! offending field (`stages[1].batch.size`), found with `serde_path_to_error`, and
//! a syntax error gives its line and column.

use serde_json::error::Category;

use crate::def::DatasetDef;
use crate::error::DatasetError;

/// The `field` of a JSON syntax error, which has no path.
const SYNTAX_FIELD: &str = "(json)";

impl DatasetDef {
    /// Parses the JSON form and validates it ([`DatasetDef::validate`]). Errors are
    /// [`DatasetError::InvalidSpec`] naming the offending field.
    pub fn from_json(s: &str) -> Result<DatasetDef, DatasetError> {
        let mut de = serde_json::Deserializer::from_str(s);
        let def: DatasetDef = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            json_error(&path, &inner)
        })?;
        de.end().map_err(|e| json_error("", &e))?;
        def.validate()?;
        Ok(def)
    }

    /// The one-line JSON form, what travels in `pb::DatasetDef` and the Raft log.
    pub fn to_json_compact(&self) -> String {
        serde_json::to_string(self).expect("a DatasetDef always serialises to JSON")
    }

    /// The pretty-printed JSON form; [`DatasetDef::from_json`] reads it back.
    pub fn to_json(&self) -> String {
        // Infallible: the types have no maps with non-string keys and no custom
        // serialisers that could fail.
        serde_json::to_string_pretty(self).expect("a DatasetDef always serialises to JSON")
    }
}

fn json_error(path: &str, e: &serde_json::Error) -> DatasetError {
    match e.classify() {
        // The path still helps find a syntax error, e.g. a stage object with two op
        // keys, which serde_json reports as a syntax error.
        Category::Syntax | Category::Eof | Category::Io => DatasetError::InvalidSpec {
            field: SYNTAX_FIELD.to_string(),
            message: if path.is_empty() || path == "." {
                e.to_string()
            } else {
                format!("{e} (while reading `{path}`)")
            },
        },
        Category::Data => DatasetError::InvalidSpec {
            field: if path.is_empty() || path == "." {
                "(root)".to_string()
            } else {
                path.to_string()
            },
            message: e.to_string(),
        },
    }
}
