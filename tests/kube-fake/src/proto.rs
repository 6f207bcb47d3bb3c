//! Decoding of the `application/vnd.kubernetes.protobuf` bodies that kubectl's typed
//! generators send (`kubectl create namespace|configmap|secret generic|serviceaccount`),
//! for exactly those four kinds. Everything else sent as protobuf is refused with 415.
//!
//! Wire format: the magic `k8s\0`, then a `runtime.Unknown` message
//! (`1: TypeMeta{1: apiVersion, 2: kind}`, `2: raw object bytes`). Field numbers are those
//! of `k8s.io/api/core/v1/generated.proto` and `…/apimachinery/…/meta/v1/generated.proto`
//! (checked against bodies captured from kubectl 1.32).

use serde_json::{Map, Value, json};

use crate::util::base64;

enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

fn varint(b: &[u8], i: &mut usize) -> Result<u64, String> {
    let mut out = 0u64;
    let mut shift = 0;
    loop {
        let byte = *b.get(*i).ok_or("truncated varint")?;
        *i += 1;
        out |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(out);
        }
        shift += 7;
        if shift > 63 {
            return Err("varint too long".into());
        }
    }
}

fn fields(b: &[u8]) -> Result<Vec<(u64, Field<'_>)>, String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i)?;
        let field = match key & 7 {
            0 => Field::Varint(varint(b, &mut i)?),
            1 => {
                i += 8;
                Field::Fixed
            }
            2 => {
                let n = usize::try_from(varint(b, &mut i)?).map_err(|e| e.to_string())?;
                let end = i.checked_add(n).filter(|e| *e <= b.len()).ok_or("truncated field")?;
                let v = &b[i..end];
                i = end;
                Field::Bytes(v)
            }
            5 => {
                i += 4;
                Field::Fixed
            }
            t => return Err(format!("unsupported wire type {t}")),
        };
        out.push((key >> 3, field));
    }
    Ok(out)
}

struct Msg<'a>(Vec<(u64, Field<'a>)>);

impl<'a> Msg<'a> {
    fn parse(b: &'a [u8]) -> Result<Self, String> {
        fields(b).map(Msg)
    }

    fn bytes(&self, n: u64) -> Vec<&'a [u8]> {
        self.0
            .iter()
            .filter(|(f, _)| *f == n)
            .filter_map(|(_, v)| if let Field::Bytes(b) = v { Some(*b) } else { None })
            .collect()
    }

    fn string(&self, n: u64) -> Option<String> {
        self.bytes(n).last().map(|b| String::from_utf8_lossy(b).into_owned()).filter(|s| !s.is_empty())
    }

    fn strings(&self, n: u64) -> Vec<String> {
        self.bytes(n).into_iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect()
    }

    fn boolean(&self, n: u64) -> Option<bool> {
        self.0.iter().rev().find_map(|(f, v)| match v {
            Field::Varint(x) if *f == n => Some(*x != 0),
            _ => None,
        })
    }

    fn message(&self, n: u64) -> Result<Option<Msg<'a>>, String> {
        self.bytes(n).last().map(|b| Msg::parse(b)).transpose()
    }

    /// A `map<string, string>` (or `map<string, bytes>` as base64 when `binary`).
    fn map(&self, n: u64, binary: bool) -> Result<Option<Value>, String> {
        let mut out = Map::new();
        for entry in self.bytes(n) {
            let e = Msg::parse(entry)?;
            let key = e.bytes(1).last().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
            let raw = e.bytes(2).last().copied().unwrap_or_default();
            let value = if binary { base64(raw) } else { String::from_utf8_lossy(raw).into_owned() };
            out.insert(key, Value::String(value));
        }
        Ok(if out.is_empty() { None } else { Some(Value::Object(out)) })
    }
}

fn metadata(m: Option<Msg>) -> Result<Value, String> {
    let mut out = Map::new();
    let Some(m) = m else { return Ok(Value::Object(out)) };
    for (n, key) in [(1, "name"), (2, "generateName"), (3, "namespace")] {
        if let Some(s) = m.string(n) {
            out.insert(key.into(), Value::String(s));
        }
    }
    for (n, key) in [(11, "labels"), (12, "annotations")] {
        if let Some(v) = m.map(n, false)? {
            out.insert(key.into(), v);
        }
    }
    let finalizers = m.strings(14);
    if !finalizers.is_empty() {
        out.insert("finalizers".into(), json!(finalizers));
    }
    Ok(Value::Object(out))
}

fn insert(obj: &mut Value, key: &str, v: Option<Value>) {
    if let (Some(v), Value::Object(m)) = (v, obj) {
        m.insert(key.into(), v);
    }
}

/// Decodes a protobuf body into the JSON object it stands for.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let raw = body.strip_prefix(b"k8s\0").ok_or("not a Kubernetes protobuf body")?;
    let unknown = Msg::parse(raw)?;
    let type_meta = unknown.message(1)?.ok_or("no TypeMeta")?;
    let api_version = type_meta.string(1).unwrap_or_default();
    let kind = type_meta.string(2).unwrap_or_default();
    let object = unknown.bytes(2).last().copied().unwrap_or_default();
    let o = Msg::parse(object)?;
    let mut out = json!({"apiVersion": api_version, "kind": kind, "metadata": metadata(o.message(1)?)?});
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => {
            let finalizers = o.message(2)?.map(|s| s.strings(1)).unwrap_or_default();
            if !finalizers.is_empty() {
                out["spec"] = json!({"finalizers": finalizers});
            }
        }
        ("v1", "ConfigMap") => {
            insert(&mut out, "data", o.map(2, false)?);
            insert(&mut out, "binaryData", o.map(3, true)?);
            insert(&mut out, "immutable", o.boolean(4).map(Value::Bool));
        }
        ("v1", "Secret") => {
            insert(&mut out, "data", o.map(2, true)?);
            insert(&mut out, "type", o.string(3).map(Value::String));
            insert(&mut out, "stringData", o.map(4, false)?);
            insert(&mut out, "immutable", o.boolean(5).map(Value::Bool));
        }
        ("v1", "ServiceAccount") => {}
        _ => return Err(format!("protobuf bodies of {api_version} {kind} are not supported")),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ld(field: u8, bytes: &[u8]) -> Vec<u8> {
        let mut v = vec![(field << 3) | 2, bytes.len() as u8];
        v.extend_from_slice(bytes);
        v
    }

    #[test]
    fn decodes_a_secret_as_kubectl_sends_it() {
        let meta = [ld(1, b"sname"), ld(2, b""), ld(11, &[ld(1, b"a"), ld(2, b"b")].concat())].concat();
        let secret = [ld(1, &meta), ld(2, &[ld(1, b"apiKey"), ld(2, b"xyz")].concat()), ld(3, b"Opaque")].concat();
        let body = [
            b"k8s\0".to_vec(),
            ld(1, &[ld(1, b"v1"), ld(2, b"Secret")].concat()),
            ld(2, &secret),
            ld(3, b""),
            ld(4, b""),
        ]
        .concat();
        let v = decode(&body).unwrap_or_default();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sname", "labels": {"a": "b"}},
                   "data": {"apiKey": "eHl6"}, "type": "Opaque"})
        );
    }
}
