//! Builds the client agent's files (`web/agent/`) into the binary: writes a table of their
//! names and contents for `page::files`.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"))
        .join("../../web/agent");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut names: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading the agent's files in {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let served = [".js", ".mjs", ".html", ".css", ".json"]
                .iter()
                .any(|ext| name.ends_with(ext));
            served.then(|| (name, e.path()))
        })
        .collect();
    names.sort();
    let mut out = String::from(
        "/// The agent's files: name, contents.\npub static FILES: &[(&str, &[u8])] = &[\n",
    );
    for (name, path) in &names {
        println!("cargo:rerun-if-changed={}", path.display());
        let path = path.canonicalize().expect("a listed file exists");
        writeln!(
            out,
            "    ({name:?}, include_bytes!({:?})),",
            path.display().to_string()
        )
        .expect("writing to a String");
    }
    out.push_str("];\n");
    let dest =
        PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it")).join("agent_files.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("writing {}: {e}", dest.display()));
}
