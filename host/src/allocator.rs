//! The process's allocator: mimalloc, with its arenas committed on demand.
//!
//! DataFusion allocates and frees large column buffers for every batch it decodes; the
//! system allocator returns them to the kernel and faults them back in each time, mimalloc
//! keeps them.
//!
//! Besides `plugin-api`'s FFI module and `ops::code_pages`, the one place the workspace's
//! `unsafe_code = deny` is lifted: setting an allocator option is a C call, and it must run
//! before `main`.
#![allow(unsafe_code)]

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Runs before `main`, so before mimalloc reserves its first arena (which reads the option).
#[used]
#[link_section = ".init_array"]
static TUNE_ALLOCATOR: extern "C" fn() = tune_allocator;

/// Turns off mimalloc's eager commit of arenas (its Linux default). Freed memory in an eagerly
/// committed arena is only marked `MADV_FREE`: the kernel takes it back under pressure, but
/// until then it counts as resident, and an idle server that had allocated 40 MB once at
/// start went on showing them. Committed on demand, freed memory is decommitted after
/// mimalloc's purge delay (1 s) and leaves the resident set; within the delay it is reused as
/// before, so a query's buffer churn still stays in the allocator.
extern "C" fn tune_allocator() {
    extern "C" {
        fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    }
    /// `mi_option_arena_eager_commit` in mimalloc's `mi_option_e`.
    const ARENA_EAGER_COMMIT: std::ffi::c_int = 4;
    // SAFETY: mimalloc's option setter takes any option index and value at any time; it only
    // records the value.
    unsafe { mi_option_set(ARENA_EAGER_COMMIT, 0) }
}
