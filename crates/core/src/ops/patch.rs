//! The go-patch operations on a document: replace, remove, test and find.
//!
//! Semantics and error texts follow cppforlife/go-patch `patch/replace_op.go`,
//! `remove_op.go`, `test_op.go`, `find_op.go`, `array_index.go`, `array_insertion.go` and
//! `errs.go`.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::gofmt;
use super::pointer::{Modifier, Pointer, Token, format_tokens};

/// Why an operation could not be applied. Display texts are go-patch's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// A step needed an array or a map and found something else.
    #[error("Expected to find {expected} at path '{path}' but found '{found}'")]
    TypeMismatch {
        /// `"an array"` or `"a map"`.
        expected: &'static str,
        /// The pointer up to the failing step.
        path: String,
        /// The Go type name of what was there (`%T`), e.g. `string`.
        found: &'static str,
    },
    /// A map key that must exist does not.
    #[error("Expected to find a map key '{key}' for path '{path}' ({})", siblings_text(.siblings))]
    MissingMapKey {
        /// The missing key.
        key: String,
        /// The pointer up to the failing step.
        path: String,
        /// The keys the map does have, sorted.
        siblings: Vec<String>,
    },
    /// An array index outside the array.
    #[error(
        "Expected to find array index '{index}' but found array of length '{len}' for path '{path}'"
    )]
    MissingIndex {
        /// The index after applying modifiers.
        index: i128,
        /// The array's length.
        len: usize,
        /// The pointer up to the failing step.
        path: String,
    },
    /// A `key=value` step matched no item or several.
    #[error("Expected to find exactly one matching array item for path '{path}' but found {found}")]
    NotOneMatch {
        /// The pointer up to the failing step.
        path: String,
        /// How many items matched.
        found: usize,
    },
    /// A token this operation does not accept at this place (e.g. `/-` in a remove).
    #[error("Expected to not find token '{token}' at path '{path}'")]
    UnexpectedToken {
        /// The Go type name of the token.
        token: &'static str,
        /// The pointer up to the failing step.
        path: String,
    },
    /// Any other go-patch failure (the text is go-patch's).
    #[error("{0}")]
    Other(String),
}

fn siblings_text(keys: &[String]) -> String {
    if keys.is_empty() {
        "found no other map keys".into()
    } else {
        format!("found map keys: '{}'", keys.join("', '"))
    }
}

fn mismatch(expected: &'static str, tokens: &[Token], found: &Value) -> PatchError {
    PatchError::TypeMismatch {
        expected,
        path: format_tokens(tokens),
        found: gofmt::type_name(found),
    }
}

fn missing_key(key: &str, tokens: &[Token], map: &Map<String, Value>) -> PatchError {
    let mut siblings: Vec<String> = map.keys().cloned().collect();
    siblings.sort();
    PatchError::MissingMapKey {
        key: key.to_string(),
        path: format_tokens(tokens),
        siblings,
    }
}

/// `ArrayIndex.Concrete`: applies `:prev`/`:next`, resolves negative indexes.
fn concrete_index(
    index: i64,
    modifiers: &[Modifier],
    len: usize,
    tokens: &[Token],
) -> Result<usize, PatchError> {
    let mut result = i128::from(index);
    for m in modifiers {
        match m {
            Modifier::Prev => result -= 1,
            Modifier::Next => result += 1,
            other => {
                return Err(PatchError::Other(format!(
                    "Expected to find one of the following modifiers: 'prev', 'next', but found modifier '{}'",
                    other.go_type()
                )));
            }
        }
    }
    let length = len as i128;
    if result >= length || -result > length {
        return Err(PatchError::MissingIndex {
            index: result,
            len,
            path: format_tokens(tokens),
        });
    }
    if result < 0 {
        result += length;
    }
    // In range by the check above.
    Ok(usize::try_from(result).unwrap_or_default())
}

/// `ArrayInsertion.Concrete` + `Update`: replace the item, or insert before/after it.
fn insert_or_set(
    arr: &mut Vec<Value>,
    index: i64,
    modifiers: &[Modifier],
    tokens: &[Token],
    value: Value,
) -> Result<(), PatchError> {
    let mut rest = Vec::new();
    let (mut before, mut after) = (false, false);
    for &m in modifiers {
        if before || after {
            return Err(PatchError::Other(format!(
                "Expected to not find any modifiers after '{}' modifier, but found modifier '{}'",
                if before { "before" } else { "after" },
                m.go_type()
            )));
        }
        match m {
            Modifier::Before => before = true,
            Modifier::After => after = true,
            other => rest.push(other),
        }
    }
    let mut num = concrete_index(index, &rest, arr.len(), tokens)?;
    if after && num != arr.len() {
        num += 1;
    }
    if before || after {
        arr.insert(num, value);
    } else {
        arr[num] = value;
    }
    Ok(())
}

/// Indexes of the maps in `arr` whose `key` is the string `value`.
fn matching(arr: &[Value], key: &str, value: &str) -> Vec<usize> {
    arr.iter()
        .enumerate()
        .filter(|(_, item)| {
            item.as_object()
                .and_then(|m| m.get(key))
                .and_then(Value::as_str)
                == Some(value)
        })
        .map(|(i, _)| i)
        .collect()
}

fn matching_index_i64(i: usize) -> i64 {
    i64::try_from(i).unwrap_or(i64::MAX)
}

/// go-patch `ReplaceOp`.
pub fn replace(doc: &mut Value, path: &Pointer, value: &Value) -> Result<(), PatchError> {
    if path.tokens().is_empty() {
        *doc = value.clone();
        return Ok(());
    }
    replace_at(doc, path, 0, value)
}

fn replace_at(obj: &mut Value, path: &Pointer, i: usize, value: &Value) -> Result<(), PatchError> {
    let tokens = path.tokens();
    let upto = &tokens[..=i];
    let is_last = i + 1 == tokens.len();
    match &tokens[i] {
        Token::Index { index, modifiers } => {
            let Value::Array(arr) = obj else {
                return Err(mismatch("an array", upto, obj));
            };
            if is_last {
                insert_or_set(arr, *index, modifiers, upto, value.clone())
            } else {
                let idx = concrete_index(*index, modifiers, arr.len(), upto)?;
                replace_at(&mut arr[idx], path, i + 1, value)
            }
        }
        Token::AfterLast => {
            let Value::Array(arr) = obj else {
                return Err(mismatch("an array", upto, obj));
            };
            if !is_last {
                return Err(PatchError::Other(format!(
                    "Expected after last index token to be last in path '{path}'"
                )));
            }
            arr.push(value.clone());
            Ok(())
        }
        Token::Matching {
            key,
            value: want,
            optional,
            modifiers,
        } => {
            let Value::Array(arr) = obj else {
                return Err(mismatch("an array", upto, obj));
            };
            let idxs = matching(arr, key, want);
            if *optional && idxs.is_empty() {
                if is_last {
                    arr.push(value.clone());
                    return Ok(());
                }
                let mut item = Map::new();
                item.insert(key.clone(), Value::String(want.clone()));
                arr.push(Value::Object(item));
                let last = arr.len() - 1;
                return replace_at(&mut arr[last], path, i + 1, value);
            }
            if idxs.len() != 1 {
                return Err(PatchError::NotOneMatch {
                    path: format_tokens(upto),
                    found: idxs.len(),
                });
            }
            let found = matching_index_i64(idxs[0]);
            if is_last {
                insert_or_set(arr, found, modifiers, upto, value.clone())
            } else {
                let idx = concrete_index(found, modifiers, arr.len(), upto)?;
                replace_at(&mut arr[idx], path, i + 1, value)
            }
        }
        Token::Key { key, optional } => {
            let Value::Object(map) = obj else {
                return Err(mismatch("a map", upto, obj));
            };
            let found = map.contains_key(key);
            if !found && !optional {
                return Err(missing_key(key, upto, map));
            }
            if is_last {
                map.insert(key.clone(), value.clone());
                return Ok(());
            }
            if !found {
                let created = match &tokens[i + 1] {
                    Token::AfterLast | Token::Matching { .. } => Value::Array(Vec::new()),
                    Token::Key { .. } => Value::Object(Map::new()),
                    Token::Index { .. } => {
                        return Err(PatchError::Other(format!(
                            "Expected to find key, matching index or after last index token at path '{}'",
                            format_tokens(&tokens[..=i + 1])
                        )));
                    }
                };
                map.insert(key.clone(), created);
            }
            match map.get_mut(key) {
                Some(child) => replace_at(child, path, i + 1, value),
                None => Err(missing_key(key, upto, map)),
            }
        }
    }
}

/// go-patch `RemoveOp`.
pub fn remove(doc: &mut Value, path: &Pointer) -> Result<(), PatchError> {
    if path.tokens().is_empty() {
        return Err(PatchError::Other("Cannot remove entire document".into()));
    }
    remove_at(doc, path, 0)
}

fn remove_at(obj: &mut Value, path: &Pointer, i: usize) -> Result<(), PatchError> {
    let tokens = path.tokens();
    let upto = &tokens[..=i];
    let is_last = i + 1 == tokens.len();
    match &tokens[i] {
        Token::Index { index, modifiers } => {
            let Value::Array(arr) = obj else {
                return Err(mismatch("an array", upto, obj));
            };
            let idx = concrete_index(*index, modifiers, arr.len(), upto)?;
            if is_last {
                arr.remove(idx);
                Ok(())
            } else {
                remove_at(&mut arr[idx], path, i + 1)
            }
        }
        Token::Matching {
            key,
            value,
            optional,
            modifiers,
        } => {
            let Value::Array(arr) = obj else {
                return Err(mismatch("an array", upto, obj));
            };
            let idxs = matching(arr, key, value);
            if *optional && idxs.is_empty() {
                return Ok(());
            }
            if idxs.len() != 1 {
                return Err(PatchError::NotOneMatch {
                    path: format_tokens(upto),
                    found: idxs.len(),
                });
            }
            let idx = concrete_index(matching_index_i64(idxs[0]), modifiers, arr.len(), upto)?;
            if is_last {
                arr.remove(idx);
                Ok(())
            } else {
                remove_at(&mut arr[idx], path, i + 1)
            }
        }
        Token::Key { key, optional } => {
            let Value::Object(map) = obj else {
                return Err(mismatch("a map", upto, obj));
            };
            if !map.contains_key(key) {
                return if *optional {
                    Ok(())
                } else {
                    Err(missing_key(key, upto, map))
                };
            }
            if is_last {
                map.shift_remove(key);
                return Ok(());
            }
            match map.get_mut(key) {
                Some(child) => remove_at(child, path, i + 1),
                None => Err(missing_key(key, upto, map)),
            }
        }
        Token::AfterLast => Err(PatchError::UnexpectedToken {
            token: "patch.AfterLastIndexToken",
            path: format_tokens(upto),
        }),
    }
}

/// go-patch `FindOp`: the value at `path`. Optional steps that are missing yield `null` (or,
/// for a missing `key=value?` item, the map `{key: value}`), as go-patch does.
pub fn find(doc: &Value, path: &Pointer) -> Result<Value, PatchError> {
    find_cow(doc, path).map(Cow::into_owned)
}

fn find_cow<'a>(doc: &'a Value, path: &Pointer) -> Result<Cow<'a, Value>, PatchError> {
    let tokens = path.tokens();
    let mut obj: Cow<'a, Value> = Cow::Borrowed(doc);
    for (i, token) in tokens.iter().enumerate() {
        let upto = &tokens[..=i];
        let is_last = i + 1 == tokens.len();
        obj = match token {
            Token::Index { index, modifiers } => {
                let Value::Array(arr) = obj.as_ref() else {
                    return Err(mismatch("an array", upto, &obj));
                };
                let idx = concrete_index(*index, modifiers, arr.len(), upto)?;
                child(obj, |v| v.as_array().and_then(|a| a.get(idx)))
            }
            Token::AfterLast => {
                return Err(PatchError::Other(format!(
                    "Expected not to find after last index token in path '{path}' (not supported in find operations)"
                )));
            }
            Token::Matching {
                key,
                value,
                optional,
                modifiers,
            } => {
                let Value::Array(arr) = obj.as_ref() else {
                    return Err(mismatch("an array", upto, &obj));
                };
                let idxs = matching(arr, key, value);
                if *optional && idxs.is_empty() {
                    let mut item = Map::new();
                    item.insert(key.clone(), Value::String(value.clone()));
                    Cow::Owned(Value::Object(item))
                } else {
                    if idxs.len() != 1 {
                        return Err(PatchError::NotOneMatch {
                            path: format_tokens(upto),
                            found: idxs.len(),
                        });
                    }
                    let idx =
                        concrete_index(matching_index_i64(idxs[0]), modifiers, arr.len(), upto)?;
                    child(obj, |v| v.as_array().and_then(|a| a.get(idx)))
                }
            }
            Token::Key { key, optional } => {
                let Value::Object(map) = obj.as_ref() else {
                    return Err(mismatch("a map", upto, &obj));
                };
                let found = map.contains_key(key);
                if !found && !optional {
                    return Err(missing_key(key, upto, map));
                }
                if found {
                    child(obj, |v| v.get(key.as_str()))
                } else if is_last {
                    Cow::Owned(Value::Null)
                } else {
                    match &tokens[i + 1] {
                        Token::Matching { .. } => Cow::Owned(Value::Array(Vec::new())),
                        Token::Key { .. } => Cow::Owned(Value::Object(Map::new())),
                        _ => {
                            return Err(PatchError::Other(format!(
                                "Expected to find key or matching index token at path '{}'",
                                format_tokens(&tokens[..=i + 1])
                            )));
                        }
                    }
                }
            }
        };
    }
    Ok(obj)
}

/// Steps into a child of a borrowed or owned value.
fn child<'a>(obj: Cow<'a, Value>, pick: impl Fn(&Value) -> Option<&Value>) -> Cow<'a, Value> {
    match obj {
        Cow::Borrowed(v) => Cow::Borrowed(pick(v).unwrap_or(&Value::Null)),
        Cow::Owned(v) => Cow::Owned(pick(&v).cloned().unwrap_or(Value::Null)),
    }
}

/// go-patch `TestOp` with a value: the value at `path` must equal `value`.
pub fn test_value(doc: &Value, path: &Pointer, value: &Value) -> Result<(), PatchError> {
    let found = find_cow(doc, path)?;
    if found.as_ref() != value {
        return Err(PatchError::Other(
            "Found value does not match expected value".into(),
        ));
    }
    Ok(())
}

/// go-patch `TestOp` with `absent: true`: nothing may be at `path` (though its parent must
/// exist).
pub fn test_absent(doc: &Value, path: &Pointer) -> Result<(), PatchError> {
    let whole = path.to_string();
    match find_cow(doc, path) {
        Ok(_) => Err(PatchError::Other(format!("Expected to not find '{whole}'"))),
        Err(
            PatchError::MissingIndex { path: p, .. } | PatchError::MissingMapKey { path: p, .. },
        ) if p == whole => Ok(()),
        Err(e) => Err(e),
    }
}
