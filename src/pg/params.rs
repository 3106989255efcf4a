//! Statement parameters sent as text, for values whose column type the
//! relay does not know: an outbox id column may be `bigint`, `uuid`,
//! `text`... (it is the user's), and a list of ids is compared with it.
//!
//! Role: [`AsText`] and [`TextArray`] are parameters in the text format of
//! the extended protocol, of whatever type the server inferred for the
//! placeholder (`id = ANY($1)` makes `$1` an array of the id column's type).
//! The server parses them with that type's input function, as it would a
//! quoted literal, but they are never part of the SQL text: nothing in a
//! value can change the statement.
//!
//! Invariant: the array text is PostgreSQL's array input syntax with every
//! element double-quoted (`"` and `\` backslash-escaped), so an element is
//! read back exactly as given whatever it contains (commas, braces, the
//! word NULL, spaces).

use std::error::Error;

use bytes::{BufMut, BytesMut};
use tokio_postgres::types::{Format, IsNull, ToSql, Type};

type BoxError = Box<dyn Error + Sync + Send>;

/// One value in text format, of the type the server inferred for it.
#[derive(Debug, Clone, Copy)]
pub struct AsText<'a>(pub &'a str);

impl ToSql for AsText<'_> {
    fn to_sql(&self, _ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        out.put_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    fn encode_format(&self, _ty: &Type) -> Format {
        Format::Text
    }

    tokio_postgres::types::to_sql_checked!();
}

/// A one-dimensional array in text format, of the array type the server
/// inferred for it (`uuid[]`, `bigint[]`, `xid[]`...).
#[derive(Debug, Clone, Copy)]
pub struct TextArray<'a, T>(pub &'a [T]);

impl<T: AsRef<str> + std::fmt::Debug + Sync> ToSql for TextArray<'_, T> {
    fn to_sql(&self, _ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        out.put_u8(b'{');
        for (i, value) in self.0.iter().enumerate() {
            if i > 0 {
                out.put_u8(b',');
            }
            out.put_u8(b'"');
            for byte in value.as_ref().bytes() {
                if byte == b'"' || byte == b'\\' {
                    out.put_u8(b'\\');
                }
                out.put_u8(byte);
            }
            out.put_u8(b'"');
        }
        out.put_u8(b'}');
        Ok(IsNull::No)
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    fn encode_format(&self, _ty: &Type) -> Format {
        Format::Text
    }

    tokio_postgres::types::to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(value: &dyn ToSql) -> String {
        let mut out = BytesMut::new();
        value.to_sql_checked(&Type::TEXT_ARRAY, &mut out).unwrap();
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn every_element_is_quoted_and_escaped() {
        let values = ["1", "a,b", "NULL", "{x}", "say \"hi\"", "back\\slash", ""];
        assert_eq!(
            text(&TextArray(&values)),
            r#"{"1","a,b","NULL","{x}","say \"hi\"","back\\slash",""}"#
        );
        assert_eq!(text(&TextArray::<String>(&[])), "{}");
        assert_eq!(text(&AsText("it's")), "it's");
        assert!(matches!(
            TextArray(&values).encode_format(&Type::INT8_ARRAY),
            Format::Text
        ));
    }
}
