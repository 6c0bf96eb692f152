//! How Go's `fmt` prints YAML-decoded values (`%T` and `%v`), for error texts that must read
//! like the BOSH CLI's. The types are the ones `gopkg.in/yaml.v2` decodes into.

use serde_json::Value;

use kubosh_base::yaml::mark::{Marked, unmark};

/// Go's `%T` of the value yaml.v2 would have produced.
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() => "int",
        Value::Number(n) if n.is_u64() => "uint64",
        Value::Number(_) => "float64",
        // `.inf` and `.nan`, kept marked (`kubosh_base::yaml::mark`).
        Value::String(s) if matches!(unmark(s), Some(Marked::Float(..))) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[interface {}]interface {}",
    }
}

/// Go's `%v` of the value (maps print with sorted keys, like `fmt` does).
pub fn value(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match n.as_f64() {
            Some(f) if !n.is_i64() && !n.is_u64() => out.push_str(&float(f)),
            _ => out.push_str(&n.to_string()),
        },
        Value::String(s) => match unmark(s) {
            Some(Marked::Float(f, _)) => out.push_str(&float(f)),
            Some(marked) => out.push_str(&marked.text()),
            None => out.push_str(s),
        },
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push_str("map[");
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                match unmark(key) {
                    Some(marked) => out.push_str(&marked.text()),
                    None => out.push_str(key),
                }
                out.push(':');
                if let Some(v) = map.get(*key) {
                    write_value(out, v);
                }
            }
            out.push(']');
        }
    }
}

/// Go's `%v` for a float64: shortest digits, exponent form when the exponent is below -4
/// or at least 6 (`1e+06`, `1.5e-05`): go-yaml v2's float text but for the non-finite.
pub fn float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    kubosh_base::yaml::mark::go_float(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn types_and_values_read_like_go() {
        assert_eq!(type_name(&json!(null)), "<nil>");
        assert_eq!(type_name(&json!(1)), "int");
        assert_eq!(type_name(&json!(1.5)), "float64");
        assert_eq!(type_name(&json!([1])), "[]interface {}");
        assert_eq!(type_name(&json!({"a": 1})), "map[interface {}]interface {}");
        assert_eq!(
            value(&json!({"b": [1, "x"], "a": null})),
            "map[a:<nil> b:[1 x]]"
        );
        assert_eq!(value(&json!(2.717)), "2.717");
    }

    #[test]
    fn floats_switch_to_exponent_form_like_go() {
        assert_eq!(float(1e6), "1e+06");
        assert_eq!(float(123456.0), "123456");
        assert_eq!(float(1234567.0), "1.234567e+06");
        assert_eq!(float(0.0001), "0.0001");
        assert_eq!(float(0.00001), "1e-05");
        assert_eq!(float(-2.5e-7), "-2.5e-07");
        assert_eq!(float(1e100), "1e+100");
        assert_eq!(float(f64::INFINITY), "+Inf");
    }

    #[test]
    fn marked_scalars_read_as_the_go_values_they_stand_for() {
        let doc = kubosh_base::yaml::parse_document("a: .inf\ny: 1\n", "doc").unwrap();
        assert_eq!(type_name(&doc["a"]), "float64");
        assert_eq!(value(&doc), "map[a:+Inf true:1]");
    }
}
