//! Getting started: a concurrent hash map.
//!
//! `mpsync::HashMap<K, V>` is the recommended map: Hart's concurrently-readable
//! table (lockless reads, per-bucket writer locks) over epoch-based
//! reclamation, resizing, with no handles to manage. `insert` replaces and
//! returns the old value; `try_insert`, `update`, `update_or_insert`,
//! `get_or_insert_with` and `compute` change an entry atomically; `pin()`
//! lends references without cloning.
//!
//! `cargo run -p mpsync --example map`

fn main() {
    let text = "the cat saw the dog and the dog saw a bird";
    let words: mpsync::HashMap<String, u32> = mpsync::HashMap::new();
    std::thread::scope(|s| {
        for half in [&text[..20], &text[20..]] {
            let words = &words;
            s.spawn(move || {
                for w in half.split_whitespace() {
                    // Atomic upsert: no count is lost between two threads.
                    words.update_or_insert(w.to_owned(), 1, |n| n + 1);
                }
            });
        }
    });
    // Lookups take any borrowed form of the key, as std's map.
    println!("\"the\" appears {:?} times", words.get("the"));

    // insert replaces; try_insert keeps what is there.
    assert_eq!(words.insert("cat".into(), 10), Some(1));
    assert!(!words.try_insert("cat".into(), 0));

    // Guard-bound references: no clone while the pin lives.
    let pinned = words.pin();
    let longest = pinned
        .iter()
        .max_by_key(|(w, _)| w.len())
        .map(|(w, _)| w.clone());
    drop(pinned);

    words.retain(|_, n| *n > 1);
    let mut left: Vec<(String, u32)> = words.iter().collect();
    left.sort();
    println!("longest word: {longest:?}; seen more than once: {left:?}");
}
