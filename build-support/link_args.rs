//! Build script shared by the shipped binaries (`svc-server`, `svc`).
//!
//! Packed relative relocations (`-z pack-relative-relocs`, DT_RELR), in every build. The
//! binaries are position-independent, with about 300,000 relative relocations (vtables,
//! static tables of pointers). As RELA entries they take 24 bytes each, 7–10 MB that the
//! loader reads once at start and that then stay resident as file pages; packed, they are a
//! bitmap of a few hundred kilobytes: less idle memory, a faster start and a smaller binary.
//! The loader must understand DT_RELR (glibc 2.36 or later), so the flag is added only for
//! a native glibc build whose own glibc is that recent.
//!
//! Optimised builds also link with identical-code folding: generic Arrow and DataFusion
//! kernels compile to many byte-identical functions that LLVM's own merging misses (their IR
//! types differ), and folding them shrinks what ships. Rust promises nothing about function
//! addresses being distinct; lld keeps data addresses distinct unless told otherwise, so
//! statics stay unique. Debug builds skip it: linking speed matters more there. The default
//! linker on this target is rust-lld.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=../build-support/link_args.rs");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let optimised = var("PROFILE") == "release";
    let linux = var("CARGO_CFG_TARGET_OS") == "linux";
    if optimised && linux {
        println!("cargo:rustc-link-arg-bins=-Wl,--icf=all");
    }
    let native_glibc =
        var("TARGET") == var("HOST") && linux && var("CARGO_CFG_TARGET_ENV") == "gnu";
    if native_glibc && glibc_version().is_some_and(|v| v >= (2, 36)) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// The build machine's glibc, from `getconf GNU_LIBC_VERSION` ("glibc 2.36").
fn glibc_version() -> Option<(u32, u32)> {
    let out = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let version = text.split_whitespace().nth(1)?;
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}
