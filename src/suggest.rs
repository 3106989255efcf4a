//! The known name nearest a misspelt one, for error texts that say "did
//! you mean": a config key, an environment variable, a JSON Schema keyword.
//! Pure.

/// Levenshtein distance between `a` and `b`, over chars: the fewest
/// insertions, deletions and substitutions that turn one into the other.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::edit_distance;

    #[test]
    fn counts_insertions_deletions_and_substitutions() {
        assert_eq!(edit_distance("requird", "required"), 1);
        assert_eq!(edit_distance("lingerr.ms", "linger.ms"), 1);
        assert_eq!(edit_distance("integr", "integer"), 1);
        assert_eq!(edit_distance("slot", "stol"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("été", "ete"), 2);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
