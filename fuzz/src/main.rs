//! A mutation fuzzer for contextfold-core that runs on stable Rust.
//!
//! Seeds are the real transcripts of `../shared/corpus` (`CONTEXTFOLD_SHARED`, or
//! `--corpus DIR`). Each round mutates one seed (and splices from another), copies it into
//! the core's arena with every string in a random text kind (Latin-1, UCS-2, UCS-4, UTF-8,
//! inline; lone surrogates included), and checks every entry point against an oracle
//! written from the SPEC: `json_len` against a `JSON.stringify` oracle, message checks and
//! sizes (with estimates scaled up to 2^40 times, so totals pass 2^64), `window_start`,
//! `compact_tail_start_for_budget` and `verbatim_start` against their definitions, `pack`
//! against the contract points of SPEC §5, and `handoff_line`. A panic or a broken
//! invariant stops the run: the input is written to `fuzz/failures/` and the exit code is 1.
//!
//! ```text
//! cargo run -p contextfold-fuzz -- --seconds 60 [--seed N] [--corpus DIR]
//! ```

// A harness reports a broken invariant by stopping; it indexes its own test data freely.
#![allow(clippy::indexing_slicing, clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod check;
mod mutate;
mod rng;
mod value;

use rng::Rng;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use value::{Strings, V};

struct Args {
    seconds: u64,
    seed: u64,
    corpus: PathBuf,
}

fn args() -> Result<Args, String> {
    let shared = std::env::var_os("CONTEXTFOLD_SHARED")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"), PathBuf::from);
    let mut out = Args {
        seconds: 60,
        seed: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_secs()),
        corpus: shared.join("corpus"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--seconds" => out.seconds = value.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--seed" => out.seed = value.parse().map_err(|e| format!("--seed: {e}"))?,
            "--corpus" => out.corpus = PathBuf::from(value),
            _ => return Err(format!("unknown flag {flag} (flags: --seconds N, --seed N, --corpus DIR)")),
        }
    }
    Ok(out)
}

/// Every transcript (a row's `messages`) of every `.jsonl` file in `dir`.
fn seeds(dir: &Path) -> Result<Vec<Vec<V>>, String> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("corpus {}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    for file in files.iter().filter(|f| f.extension().is_some_and(|x| x == "jsonl")) {
        let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        for line in text.lines() {
            let row: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("{}: {e}", file.display()))?;
            if let Some(serde_json::Value::Array(messages)) = row.get("messages") {
                out.push(messages.iter().map(V::from_json).collect());
            }
        }
    }
    if out.is_empty() {
        return Err(format!("no transcripts in {}", dir.display()));
    }
    Ok(out)
}

/// How far a round's checks went.
#[derive(Clone, Copy)]
enum Reached {
    /// A malformed message: the error was checked.
    Malformed,
    /// Content past the depth limit: the error was checked.
    TooDeep,
    /// Every check, packing included.
    Packed,
}

/// One round: every check on one transcript.
fn round(t: &[V], rng: &mut Rng) -> Result<Reached, check::Failure> {
    let strings = Strings::new(t, rng);
    let (arena, roots) = strings.arena(t);
    let nodes: Vec<_> = roots.iter().map(|&r| arena.node(r)).collect();
    check::json_lengths(t, &nodes)?;
    check::lines(&nodes, t)?;
    let scale = *rng.pick(&[1, 1, 1, 1 << 20, 1 << 40]).unwrap_or(&1);
    let Some(sizes) = check::sizes(t, &nodes, scale)? else { return Ok(Reached::Malformed) };
    // A message past the depth limit can only be checked to fail cleanly (done above).
    let Some(sizes) = sizes.into_iter().collect::<Option<Vec<u64>>>() else { return Ok(Reached::TooDeep) };
    check::windows(&nodes, t, &sizes, scale, rng)?;
    check::packing(&nodes, t, &sizes, scale, rng)?;
    Ok(Reached::Packed)
}

fn run(args: &Args) -> Result<[u64; 3], String> {
    let pool = seeds(&args.corpus)?;
    let mut rng = Rng::new(args.seed);
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let mut reached = [0u64; 3];
    while Instant::now() < deadline {
        let mut t = pool[rng.below(pool.len())].clone();
        let other = &pool[rng.below(pool.len())];
        mutate::mutate(&mut t, other, &mut rng);
        let round_seed = rng.next();
        let outcome = std::panic::catch_unwind(|| round(&t, &mut Rng::new(round_seed)))
            .unwrap_or_else(|panic| Err(format!("panic: {}", panic_text(&*panic))));
        match outcome {
            Ok(r) => reached[r as usize] += 1,
            Err(failure) => {
                let path = save(&t, round_seed);
                let rounds: u64 = reached.iter().sum();
                return Err(format!("round {rounds} (seed {round_seed}): {failure}\ninput: {path}"));
            }
        }
    }
    Ok(reached)
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(ToString::to_string)
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// Writes the failing transcript (as JSON.stringify would) for replay and debugging.
fn save(t: &[V], seed: u64) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("failures");
    let path = dir.join(format!("{seed}.json"));
    let json = value::stringify(&V::Arr(t.to_vec()), usize::MAX).unwrap_or_default();
    let written = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, String::from_utf16_lossy(&json)));
    match written {
        Ok(()) => path.display().to_string(),
        Err(e) => format!("(not saved: {e})"),
    }
}

fn main() {
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("contextfold-fuzz: {e}");
            std::process::exit(2);
        }
    };
    // Deep values are built and printed recursively by the oracle: a large stack.
    let seed = args.seed;
    let worker = std::thread::Builder::new().stack_size(1 << 30).spawn(move || run(&args));
    let outcome =
        worker.map_err(|e| e.to_string()).and_then(|h| h.join().map_err(|_| "the fuzzer panicked".to_string()));
    match outcome.and_then(|r| r) {
        Ok([malformed, too_deep, packed]) => println!(
            "contextfold-fuzz: {} rounds, no failure (seed {seed}): {packed} packed, {malformed} malformed, {too_deep} too deep",
            malformed + too_deep + packed
        ),
        Err(e) => {
            eprintln!("contextfold-fuzz: FAILED {e}");
            std::process::exit(1);
        }
    }
}
