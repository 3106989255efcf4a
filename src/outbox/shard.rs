//! Which shard of `postgres.shards` an outbox event belongs to: the one
//! function of the aggregate id that the publication row filter computes on
//! the server, also computed here for what no row filter reaches (outbox
//! logical messages) and written out for what deletes rows (the cleanup's
//! delete by `xmin`).
//!
//! Role: [`filter_sql`] is the filter's text (`init` creates it, `check`
//! compares it, the cleanup narrows its deletes with it); [`Shard::owns`]
//! is the same function in Rust, through [`hashtext`], PostgreSQL's
//! `hashtext` for text of a deterministic collation.
//!
//! Invariants:
//! * one function on both sides: `coalesce(abs(hashtext(id)::bigint) % N,
//!   0)`; a NULL (absent) aggregate id is shard 0, never none;
//! * [`hashtext`] is `hash_bytes` of PostgreSQL's `src/common/hashfn.c`
//!   (Bob Jenkins' lookup3, as the little-endian servers run it) over the
//!   text's bytes, which are the UTF-8 bytes of the id in a UTF8 database;
//!   the unit tests pin it to values a server returned, an integration test
//!   compares it with the server on random strings;
//! * `hashtext` may return `i32::MIN`, whose `abs` overflows in `integer`:
//!   the value is widened to `bigint` first, on the server and here.

use postgres_protocol::escape::escape_identifier;

use super::message;

/// A relay's place among the shards of its outbox (`postgres.shards`,
/// `postgres.shard`); one shard of one when the outbox is not split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// How many shards the outbox is split into (1: not sharded).
    pub shards: u32,
    /// This relay's shard, `0..shards`.
    pub shard: u32,
}

impl Default for Shard {
    fn default() -> Self {
        Shard {
            shards: 1,
            shard: 0,
        }
    }
}

impl Shard {
    /// Whether the outbox is split between relays.
    pub fn is_sharded(self) -> bool {
        self.shards > 1
    }

    /// Whether an event of `aggregate_id` (`None`: NULL or absent) is this
    /// shard's to publish. Everything is, when not sharded.
    pub fn owns(self, aggregate_id: Option<&str>) -> bool {
        !self.is_sharded() || shard_of(aggregate_id, self.shards) == self.shard
    }

    /// Whether an outbox logical message with `content` is this shard's to
    /// publish: no row filter applies to logical messages, every shard's
    /// slot receives each one. Its aggregate id is read from the content
    /// only when sharded; a message without one is shard 0's.
    pub fn owns_message(self, content: &[u8]) -> bool {
        !self.is_sharded() || self.owns(message::aggregate_id(content).as_deref())
    }

    /// This shard's row filter on `column`; `None` when not sharded.
    pub fn filter_sql(self, column: &str) -> Option<String> {
        self.is_sharded()
            .then(|| filter_sql(column, self.shards, self.shard))
    }
}

/// The row filter of shard `shard` of `shards` on `column`, as written in
/// `CREATE PUBLICATION ... WHERE (<filter>)`.
pub fn filter_sql(column: &str, shards: u32, shard: u32) -> String {
    format!(
        "coalesce(abs(hashtext({})::bigint) % {shards}, 0) = {shard}",
        escape_identifier(column)
    )
}

/// The shard of `shards` that [`filter_sql`] puts `aggregate_id` in.
pub fn shard_of(aggregate_id: Option<&str>, shards: u32) -> u32 {
    let Some(id) = aggregate_id else {
        return 0;
    };
    let hash = i64::from(hashtext(id.as_bytes()));
    // Below `shards`, which is a u32: the conversion cannot fail.
    u32::try_from(hash.abs() % i64::from(shards.max(1))).unwrap_or(0)
}

/// PostgreSQL's `hashtext` of a text whose bytes are `text` (deterministic
/// collation): `hash_bytes`, its `uint32` read as an `int4`.
pub fn hashtext(text: &[u8]) -> i32 {
    i32::from_ne_bytes(hash_bytes(text).to_ne_bytes())
}

/// lookup3's `hashlittle` as PostgreSQL 8.4+ runs it: the length goes into
/// the initial state, and the final mix runs even for an empty key.
fn hash_bytes(key: &[u8]) -> u32 {
    // A text is at most 1 GB: its length fits, and PostgreSQL adds it as a
    // 32-bit value too.
    let len = u32::try_from(key.len()).unwrap_or(u32::MAX);
    let init = 0x9e37_79b9_u32.wrapping_add(len).wrapping_add(3_923_095);
    let (mut a, mut b, mut c) = (init, init, init);
    let mut blocks = key.chunks_exact(12);
    for block in &mut blocks {
        a = a.wrapping_add(word(&block[0..4]));
        b = b.wrapping_add(word(&block[4..8]));
        c = c.wrapping_add(word(&block[8..12]));
        mix(&mut a, &mut b, &mut c);
    }
    // The last 0 to 11 bytes, zero-padded: the first four into `a`, the
    // next four into `b`, the rest into `c` above its lowest byte.
    let mut tail = [0u8; 12];
    let rest = blocks.remainder();
    tail[..rest.len()].copy_from_slice(rest);
    a = a.wrapping_add(word(&tail[0..4]));
    b = b.wrapping_add(word(&tail[4..8]));
    c = c.wrapping_add(word(&tail[8..12]) << 8);
    finish(&mut a, &mut b, &mut c);
    c
}

/// Four bytes as a little-endian word.
fn word(bytes: &[u8]) -> u32 {
    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    for (r1, r2, r3) in [(4, 6, 8), (16, 19, 4)] {
        *a = a.wrapping_sub(*c) ^ c.rotate_left(r1);
        *c = c.wrapping_add(*b);
        *b = b.wrapping_sub(*a) ^ a.rotate_left(r2);
        *a = a.wrapping_add(*c);
        *c = c.wrapping_sub(*b) ^ b.rotate_left(r3);
        *b = b.wrapping_add(*a);
    }
}

fn finish(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c = (*c ^ *b).wrapping_sub(b.rotate_left(14));
    *a = (*a ^ *c).wrapping_sub(c.rotate_left(11));
    *b = (*b ^ *a).wrapping_sub(a.rotate_left(25));
    *c = (*c ^ *b).wrapping_sub(b.rotate_left(16));
    *a = (*a ^ *c).wrapping_sub(c.rotate_left(4));
    *b = (*b ^ *a).wrapping_sub(a.rotate_left(14));
    *c = (*c ^ *b).wrapping_sub(b.rotate_left(24));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SELECT n, hashtext(left('abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH', n))
    /// FROM generate_series(0, 40) n` on PostgreSQL 15 (UTF8): every tail
    /// length, with zero to three 12-byte blocks before it.
    const PREFIXES: [i32; 41] = [
        -1477818771,
        1075015857,
        1718550461,
        -785388649,
        -393934804,
        -445659580,
        -1747460160,
        501636814,
        -1960928205,
        -92131489,
        1948051852,
        -1483803693,
        -1586087212,
        405849808,
        315215413,
        -1389283689,
        -2079749669,
        1648114242,
        -952297252,
        -684650393,
        766334193,
        2124303250,
        -50608962,
        -1149376136,
        1251586959,
        980150893,
        167831483,
        -1923549396,
        -636332337,
        -412030706,
        89653194,
        -908372798,
        1203288424,
        -19649275,
        -189095804,
        -1475196007,
        1318422268,
        -22154523,
        721360856,
        -235185553,
        1451736991,
    ];

    #[test]
    fn hashtext_matches_the_server_for_every_length_up_to_40() {
        let text = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH";
        for (n, want) in PREFIXES.iter().enumerate() {
            assert_eq!(hashtext(&text.as_bytes()[..n]), *want, "length {n}");
        }
    }

    #[test]
    fn hashtext_matches_the_server_on_multibyte_utf8() {
        // `SELECT x, hashtext(x)` on the same server.
        for (text, want) in [
            ("agg-0", -206326608),
            ("agg-1", -46586821),
            ("agg-42", 397129960),
            ("order-7f3a", 1483871334),
            ("é", -983094517),
            ("€", -1881914074),
            ("😀", 1734229978),
            ("agg-😀-ü-42", -2039918108),
            ("😀😀😀😀", -981786349),
            ("ÿÿÿÿÿÿÿÿÿÿÿÿÿ", -1468203891),
            ("b3c1b0a2-6f1e-4c2e-9d7a-2f8e1c0d4b5a", -1715921793),
            ("Agg Id", 2120525537),
            (" ", 1206411442),
            ("ab€😀cdefghij", 1747426909),
            ("x😀y😀z😀w😀v😀u😀", -1568741146),
        ] {
            assert_eq!(hashtext(text.as_bytes()), want, "{text:?}");
        }
    }

    #[test]
    fn the_shard_is_the_filters_function_and_null_is_shard_0() {
        // agg-0: |-206326608| % 2 = 0, % 3 = 0, % 7 = 2.
        assert_eq!(shard_of(Some("agg-0"), 2), 0);
        assert_eq!(shard_of(Some("agg-0"), 7), 206_326_608 % 7);
        // agg-1: |-46586821| is odd.
        assert_eq!(shard_of(Some("agg-1"), 2), 1);
        assert_eq!(shard_of(Some("agg-42"), 5), 397_129_960 % 5);
        assert_eq!(shard_of(None, 4), 0);
        assert_eq!(shard_of(Some("anything"), 1), 0);
        let two = |shard| Shard { shards: 2, shard };
        assert!(two(1).owns(Some("agg-1")) && !two(0).owns(Some("agg-1")));
        assert!(two(0).owns(None) && !two(1).owns(None));
        assert!(Shard::default().owns(Some("agg-1")) && Shard::default().owns(None));
    }

    #[test]
    fn a_message_is_owned_by_its_aggregates_shard_and_an_undecodable_one_by_0() {
        let two = |shard| Shard { shards: 2, shard };
        // agg-0 is shard 0's, agg-1 shard 1's (above).
        let agg1 = br#"{"id":"e","aggregatetype":"o","aggregateid":"agg-1","type":"T","payload":{"aggregateid":"agg-0"}}"#;
        assert!(two(1).owns_message(agg1) && !two(0).owns_message(agg1));
        let agg0 = br#"{"aggregateid":"agg-0","payload":1}"#;
        assert!(two(0).owns_message(agg0) && !two(1).owns_message(agg0));
        for undecodable in [&b"not json"[..], br#"{"id":"e"}"#, br#"{"aggregateid":1}"#] {
            assert!(two(0).owns_message(undecodable));
            assert!(!two(1).owns_message(undecodable));
        }
        // Not sharded: every message, decodable or not.
        assert!(Shard::default().owns_message(b"not json"));
        assert!(Shard::default().owns_message(agg1));
    }

    #[test]
    fn the_filter_names_the_column_shards_and_shard() {
        assert_eq!(
            filter_sql("aggregateid", 4, 3),
            "coalesce(abs(hashtext(\"aggregateid\")::bigint) % 4, 0) = 3"
        );
        assert_eq!(
            filter_sql("Agg Id", 2, 0),
            "coalesce(abs(hashtext(\"Agg Id\")::bigint) % 2, 0) = 0"
        );
        assert_eq!(Shard::default().filter_sql("aggregateid"), None);
        assert_eq!(
            Shard {
                shards: 3,
                shard: 1
            }
            .filter_sql("a")
            .as_deref(),
            Some("coalesce(abs(hashtext(\"a\")::bigint) % 3, 0) = 1")
        );
    }
}
