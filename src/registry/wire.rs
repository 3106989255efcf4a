//! Confluent's wire format, which every Confluent-compatible deserializer
//! reads: a zero magic byte, the schema's registry id as 4 bytes big-endian,
//! then the encoded record. For Protobuf, between id and record, the
//! message indexes: which message of the schema's `.proto` file the record
//! is, as a path (`[0]` the first top-level message, `[1, 0]` the first
//! message nested in the second), written as a count and the indexes, each
//! a zigzag varint, and `[0]` as a single `0`.
//!
//! Pure functions, no I/O.

/// The first byte of every framed record.
pub const MAGIC: u8 = 0;

/// Magic byte and schema id.
pub const HEADER_LEN: usize = 5;

/// A framed record taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unframed<'a> {
    pub schema_id: u32,
    /// Protobuf's message indexes (empty for the other formats).
    pub message_indexes: Vec<u32>,
    pub body: &'a [u8],
}

/// Why bytes are not a framed record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("{0} bytes, shorter than the 5 of the magic byte and schema id")]
    TooShort(usize),
    #[error("magic byte {0}, not 0: not in the schema registry's wire format")]
    Magic(u8),
    #[error("the Protobuf message indexes are malformed")]
    MessageIndexes,
}

/// `body` framed for the schema `schema_id` (Avro, JSON Schema).
pub fn frame(schema_id: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.push(MAGIC);
    out.extend_from_slice(&schema_id.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A Protobuf `body` framed for the schema `schema_id` and the message at
/// `message_indexes` in it (`&[0]`, the first message, is one byte `0`; an
/// empty path means the same).
pub fn frame_protobuf(schema_id: u32, message_indexes: &[u32], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + 1 + body.len());
    out.push(MAGIC);
    out.extend_from_slice(&schema_id.to_be_bytes());
    encode_message_indexes(message_indexes, &mut out);
    out.extend_from_slice(body);
    out
}

/// Appends `indexes` as Confluent's serializers write them.
pub fn encode_message_indexes(indexes: &[u32], out: &mut Vec<u8>) {
    if indexes.is_empty() || indexes == [0] {
        out.push(0);
        return;
    }
    write_zigzag(indexes.len() as u64, out);
    for &index in indexes {
        write_zigzag(u64::from(index), out);
    }
}

/// Takes apart a record framed by [`frame`].
///
/// # Errors
/// Too short, or not starting with the magic byte.
pub fn unframe(bytes: &[u8]) -> Result<Unframed<'_>, WireError> {
    let (schema_id, body) = header(bytes)?;
    Ok(Unframed {
        schema_id,
        message_indexes: Vec::new(),
        body,
    })
}

/// Takes apart a record framed by [`frame_protobuf`].
///
/// # Errors
/// As [`unframe`], or the message indexes are malformed.
pub fn unframe_protobuf(bytes: &[u8]) -> Result<Unframed<'_>, WireError> {
    let (schema_id, mut rest) = header(bytes)?;
    let count = read_zigzag(&mut rest)?;
    let message_indexes = if count == 0 {
        vec![0]
    } else {
        // Each index takes a byte at least: a count beyond what is left
        // is malformed (and allocates nothing).
        if count > rest.len() as u64 {
            return Err(WireError::MessageIndexes);
        }
        (0..count)
            .map(|_| u32::try_from(read_zigzag(&mut rest)?).map_err(|_| WireError::MessageIndexes))
            .collect::<Result<_, _>>()?
    };
    Ok(Unframed {
        schema_id,
        message_indexes,
        body: rest,
    })
}

fn header(bytes: &[u8]) -> Result<(u32, &[u8]), WireError> {
    if bytes.len() < HEADER_LEN {
        return Err(WireError::TooShort(bytes.len()));
    }
    if bytes[0] != MAGIC {
        return Err(WireError::Magic(bytes[0]));
    }
    let id = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
    Ok((id, &bytes[HEADER_LEN..]))
}

/// A non-negative `value` as a zigzag varint (Confluent's
/// `ByteUtils.writeVarint`): `2 * value`, 7 bits a byte, low bits first.
fn write_zigzag(value: u64, out: &mut Vec<u8>) {
    let mut v = value << 1;
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a zigzag varint that must be non-negative and fit an `i32`, as
/// Confluent's `ByteUtils.readVarint` requires.
fn read_zigzag(bytes: &mut &[u8]) -> Result<u64, WireError> {
    let mut value: u64 = 0;
    for shift in (0..35).step_by(7) {
        let (&byte, rest) = bytes.split_first().ok_or(WireError::MessageIndexes)?;
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            if value & 1 == 1 || value >> 1 > i32::MAX as u64 {
                return Err(WireError::MessageIndexes); // negative, or too big
            }
            return Ok(value >> 1);
        }
    }
    Err(WireError::MessageIndexes)
}

#[cfg(test)]
mod tests;
