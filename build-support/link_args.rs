//! Build script shared by the shipped binaries (`svc-server`, `svc`).
//!
//! Optimised builds link with identical-code folding: generic Arrow and DataFusion kernels
//! compile to many byte-identical functions that LLVM's own merging misses (their IR types
//! differ), and folding them shrinks what ships. Rust
//! promises nothing about function addresses being distinct; lld keeps data addresses
//! distinct unless told otherwise, so statics stay unique. Debug builds skip it: linking
//! speed matters more there. The default linker on this target is rust-lld.

fn main() {
    println!("cargo:rerun-if-changed=../build-support/link_args.rs");
    let optimised = std::env::var("PROFILE").as_deref() == Ok("release");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
    if optimised && linux {
        println!("cargo:rustc-link-arg-bins=-Wl,--icf=all");
    }
}
