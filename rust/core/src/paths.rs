//! Path canonicalisation and repo-relative resolution for code maps.
//!
//! Paths arrive as the agent wrote them: Windows backslashes, MSYS drive paths
//! (`/c/code/x` for `C:/code/x`), doubled slashes and `./`. Canonical paths compare
//! equal whatever the spelling; a repo path is relative to the workspace root, or absent
//! when it is not a repository file worth mapping (outside the root, escaping with `..`,
//! dependencies, build output, the knowledge tree, lockfiles).
//!
//! Paths are sequences of code points (`u32`), not Rust strings, so a lone surrogate in
//! a Python `str` survives unchanged, as it does in the reference.

use crate::text::is_js_space;

/// Directory names whose files are never "where the code is".
pub const NOISE_SEGMENTS: [&str; 7] = ["node_modules", "dist", ".next", ".turbo", "coverage", ".git", ".builderforce"];
/// Lockfiles: touched by everything, never the answer.
pub const NOISE_FILES: [&str; 4] = ["pnpm-lock.yaml", "package-lock.json", "yarn.lock", "bun.lockb"];

const SLASH: u32 = '/' as u32;
const BACKSLASH: u32 = '\\' as u32;
const DOT: u32 = '.' as u32;
const COLON: u32 = ':' as u32;

fn is_space(c: u32) -> bool {
    char::from_u32(c).is_some_and(is_js_space)
}

/// `String#trim`: JavaScript's whitespace set at both ends.
pub fn js_trim(s: &[u32]) -> &[u32] {
    let start = s.iter().position(|&c| !is_space(c)).unwrap_or(s.len());
    let end = s.iter().rposition(|&c| !is_space(c)).map_or(start, |i| i + 1);
    s.get(start..end).unwrap_or_default()
}

fn is_ascii_letter(c: u32) -> bool {
    char::from_u32(c).is_some_and(|c| c.is_ascii_alphabetic())
}

/// `^[a-z]:/` (any case): a drive path.
fn is_drive(p: &[u32]) -> bool {
    matches!(p, [d, COLON, SLASH, ..] if is_ascii_letter(*d))
}

/// Trimmed, backslashes as `/`, `/c/x` as `c:/x`, `//` collapsed, `./` removed (at the
/// start and after a `/`).
pub fn canonical(raw: &[u32]) -> Vec<u32> {
    let mut p: Vec<u32> = js_trim(raw).iter().map(|&c| if c == BACKSLASH { SLASH } else { c }).collect();
    if let [SLASH, d, SLASH, ..] = p.as_slice() {
        if is_ascii_letter(*d) {
            let drive = *d;
            p.splice(0..3, [drive, COLON, SLASH]);
        }
    }
    // Collapse runs of slashes.
    let mut collapsed: Vec<u32> = Vec::with_capacity(p.len());
    for c in p {
        if !(c == SLASH && collapsed.last() == Some(&SLASH)) {
            collapsed.push(c);
        }
    }
    // Drop `./` runs that open the path or follow a slash.
    let mut out: Vec<u32> = Vec::with_capacity(collapsed.len());
    let mut i = 0;
    while let Some(&c) = collapsed.get(i) {
        let at_boundary =
            out.is_empty() && i == 0 || out.last() == Some(&SLASH) && collapsed.get(i.wrapping_sub(1)) == Some(&SLASH);
        if at_boundary && c == DOT && collapsed.get(i + 1) == Some(&SLASH) {
            while collapsed.get(i) == Some(&DOT) && collapsed.get(i + 1) == Some(&SLASH) {
                i += 2;
            }
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

fn equals(segment: &[u32], name: &str) -> bool {
    segment.len() == name.chars().count() && segment.iter().zip(name.chars()).all(|(&a, b)| a == u32::from(b))
}

/// The path relative to `root`, or `Ok(None)` when it is not a repo file worth mapping.
/// Drive paths compare case-insensitively, as their filesystems do: a root's folder is
/// the path's leading folder when `lower` (the host's lower-casing, so that every backend
/// folds alike; it may fail) makes them equal.
///
/// # Errors
/// What `lower` returns.
pub fn repo_path<E>(
    raw: &[u32],
    root: Option<&[u32]>,
    mut lower: impl FnMut(&[u32]) -> Result<Vec<u32>, E>,
) -> Result<Option<Vec<u32>>, E> {
    let mut p = canonical(raw);
    if p.first() == Some(&SLASH) || is_drive(&p) {
        let mut base = root.map(canonical).unwrap_or_default();
        while base.last() == Some(&SLASH) {
            base.pop();
        }
        if base.is_empty() {
            return Ok(None);
        }
        // `C:/` and `C:` too (trailing slashes stripped).
        let cut = if is_drive(&base) || matches!(base.as_slice(), [d, COLON] if is_ascii_letter(*d)) {
            folded_cut(&p, &base, &mut lower)?
        } else {
            (p.len() > base.len() && p.starts_with(&base) && p.get(base.len()) == Some(&SLASH))
                .then_some(base.len() + 1)
        };
        let Some(rest) = cut.and_then(|cut| p.get(cut..)) else { return Ok(None) };
        p = rest.to_vec();
    }
    Ok(relative_repo_file(p))
}

/// Where `p` goes on past its leading folder that equals `base` but for case (as `lower`
/// folds both), or `None`. A character lower-cases to as many characters alone as in a
/// text (U+0130 to two), so the one prefix whose lower case is as long as `base`'s is
/// found by lengths, and compared once.
fn folded_cut<E>(
    p: &[u32],
    base: &[u32],
    lower: &mut impl FnMut(&[u32]) -> Result<Vec<u32>, E>,
) -> Result<Option<usize>, E> {
    let folded = lower(base)?;
    let (mut j, mut grown) = (0, 0);
    while j + grown < folded.len() {
        let Some(&c) = p.get(j) else { break };
        if c >= 0x80 {
            grown += lower(&[c])?.len().saturating_sub(1);
        }
        j += 1;
    }
    let prefix = p.get(..j).unwrap_or_default();
    Ok((j + grown == folded.len() && p.get(j) == Some(&SLASH) && lower(prefix)? == folded).then_some(j + 1))
}

/// `p` (relative, canonical) when it is a repo file worth mapping.
fn relative_repo_file(p: Vec<u32>) -> Option<Vec<u32>> {
    if p.is_empty() {
        return None;
    }
    let segments: Vec<&[u32]> = p.split(|&c| c == SLASH).collect();
    if segments.iter().any(|s| equals(s, "..")) {
        return None;
    }
    if segments.iter().any(|s| NOISE_SEGMENTS.iter().any(|n| equals(s, n))) {
        return None;
    }
    if segments.last().is_some_and(|last| NOISE_FILES.iter().any(|n| equals(last, n))) {
        return None;
    }
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(s: &str) -> Vec<u32> {
        s.chars().map(u32::from).collect()
    }

    fn text(v: &[u32]) -> String {
        v.iter().filter_map(|&c| char::from_u32(c)).collect()
    }

    #[test]
    fn canonical_spellings() {
        for (raw, want) in [
            (" a\\b\\c.ts ", "a/b/c.ts"),
            ("/c/code/x", "c:/code/x"),
            ("a//b///c", "a/b/c"),
            ("./a/./b", "a/b"),
            ("././a", "a"),
            ("a/.//b", "a/b"),
            ("a./b", "a./b"),
            ("\u{FEFF}x\u{1c}", "x\u{1c}"),
        ] {
            assert_eq!(text(&canonical(&cp(raw))), want, "{raw:?}");
        }
    }

    /// Rust's lower-casing, for the tests (the binding folds as Python's `str.lower`).
    fn lower(s: &[u32]) -> Result<Vec<u32>, std::convert::Infallible> {
        Ok(text(s).to_lowercase().chars().map(u32::from).collect())
    }

    #[test]
    fn repo_relative_resolution() {
        let root = cp("C:\\code\\repo");
        let rp = |raw: &str, root: Option<&[u32]>| repo_path(&cp(raw), root, lower).unwrap().map(|p| text(&p));
        // A drive root compares as any drive folder; a cut where the root's folder ends.
        assert_eq!(rp("c:\\src\\a.ts", Some(&cp("C:\\"))), Some("src/a.ts".into()));
        assert_eq!(rp("c:/i\u{307}/src/a.ts", Some(&cp("C:/\u{130}"))), Some("src/a.ts".into()));
        assert_eq!(rp("C:/\u{130}/src/a.ts", Some(&cp("c:/i\u{307}"))), Some("src/a.ts".into()));
        assert_eq!(rp("C:\\code\\repo\\src\\a.ts", Some(&root)), Some("src/a.ts".into()));
        assert_eq!(rp("/c/CODE/repo/src/a.ts", Some(&root)), Some("src/a.ts".into()));
        assert_eq!(rp("/abs/a.ts", None), None);
        assert_eq!(rp("/abs/a.ts", Some(&cp("/"))), None);
        assert_eq!(rp("/srv/repo/a.ts", Some(&cp("/srv/repo/"))), Some("a.ts".into()));
        assert_eq!(rp("/srv/repo2/a.ts", Some(&cp("/srv/repo"))), None);
        assert_eq!(rp("../up.ts", None), None);
        assert_eq!(rp("web/node_modules/x/y.js", None), None);
        assert_eq!(rp("pkg/yarn.lock", None), None);
        assert_eq!(rp("  ", None), None);
    }
}
