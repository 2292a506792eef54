use std::sync::{Arc, Mutex};

use super::*;

/// Every span the tests finish, from one sink installed for the whole test binary (a sink
/// is process-wide); each test looks only at its own trace.
fn finished() -> Arc<Mutex<Vec<Finished>>> {
    static SPANS: OnceLock<Arc<Mutex<Vec<Finished>>>> = OnceLock::new();
    SPANS
        .get_or_init(|| {
            struct Collect(Arc<Mutex<Vec<Finished>>>);
            impl Sink for Collect {
                fn push(&self, span: &Finished) {
                    self.0.lock().unwrap().push(span.clone());
                }
            }
            let spans = Arc::<Mutex<Vec<Finished>>>::default();
            assert!(install(Arc::new(Collect(spans.clone()))));
            spans
        })
        .clone()
}

fn of_trace(trace_id: TraceId) -> Vec<Finished> {
    finished()
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.trace_id == trace_id)
        .cloned()
        .collect()
}

fn named<'a>(spans: &'a [Finished], name: &str) -> &'a Finished {
    spans
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no span {name} in {spans:?}"))
}

#[test]
fn children_hang_under_the_span_current_where_they_were_made() {
    finished();
    let trace_id = TraceId::random();
    let caller = SpanId::random();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut root = Span::root(trace_id, Some(caller), "request", Kind::Server);
    root.share(Shared::leak(vec![("http.request.method", "GET".into())]));
    root.set("request_id", "r-1".to_owned());
    let context = root.context();
    rt.block_on(
        async {
            let step = async {
                tokio::task::yield_now().await;
                let _inner = Span::child("inner");
            }
            .in_child("step");
            step.await;
            assert_eq!(
                current(),
                context,
                "the root is current between its children"
            );
        }
        .in_context(context),
    );
    root.rename("GET /things");
    // The set it ends with replaces the one it started with.
    root.share(Shared::leak(vec![
        ("http.request.method", "GET".into()),
        ("http.response.status_code", 200u16.into()),
    ]));
    drop(root);

    let spans = of_trace(trace_id);
    assert_eq!(spans.len(), 3, "{spans:?}");
    let root = named(&spans, "GET /things");
    let step = named(&spans, "step");
    let inner = named(&spans, "inner");
    assert_eq!(root.parent, Some(caller));
    assert_eq!(root.kind, Kind::Server);
    assert_eq!(step.parent, Some(root.span_id));
    assert_eq!(inner.parent, Some(step.span_id));
    assert!(step.start <= inner.start && inner.end <= step.end);
    assert!(step.end <= root.end);
    assert_eq!(
        root.all_attributes().cloned().collect::<Vec<_>>(),
        vec![
            ("http.request.method", Value::from("GET")),
            ("http.response.status_code", Value::Int(200)),
            ("request_id", Value::from("r-1".to_owned())),
        ]
    );
    assert!(!root.failed && !step.failed, "work fails only when told");
    assert_eq!(current(), None, "nothing stays current after the work");
}

#[test]
fn a_span_told_its_work_failed_says_so_and_an_empty_one_ignores_it() {
    finished();
    let trace_id = TraceId::random();
    let mut root = Span::root(trace_id, None, "request", Kind::Server);
    root.fail();
    drop(root);
    assert!(named(&of_trace(trace_id), "request").failed);
    let mut none = Span::none();
    none.fail();
    assert!(!none.is_recording());
}

#[test]
fn work_handed_to_another_task_stays_in_its_trace() {
    finished();
    let trace_id = TraceId::random();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let root = Span::root(trace_id, None, "request", Kind::Server);
    let root_id = root.context().unwrap().span_id;
    let entered = root.enter();
    let handed = rt.spawn(async { drop(Span::child("handed")) }.in_current());
    let lost = rt.spawn(async { Span::child("lost").is_recording() });
    drop(entered);
    rt.block_on(handed).unwrap();
    assert!(
        !rt.block_on(lost).unwrap(),
        "a task spawned without its context records nothing"
    );
    drop(root);
    let spans = of_trace(trace_id);
    assert_eq!(named(&spans, "handed").parent, Some(root_id));
    assert!(spans.iter().all(|s| s.name != "lost"));
}

#[test]
fn an_unsampled_trace_and_work_outside_any_span_record_nothing() {
    finished();
    assert!(!Span::child("orphan").is_recording());
    let unsampled = Span::none();
    let _entered = unsampled.enter();
    let mut child = Span::child("under nothing");
    assert!(!child.is_recording());
    child.set("ignored", true);
    child.share(Shared::leak(vec![("ignored", true.into())]));
    assert_eq!(child.context(), None);
}

#[test]
fn a_panicking_poll_puts_back_the_span_that_was_current() {
    finished();
    let root = Span::root(TraceId::random(), None, "request", Kind::Server);
    let outer = root.context();
    let _entered = root.enter();
    let inner = Span::child("panics");
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async { panic!("boom") }.in_span(inner));
    }));
    assert!(caught.is_err());
    assert_eq!(current(), outer);
}

#[test]
fn ids_are_random_never_zero_and_written_as_lower_case_hex() {
    let (a, b) = (TraceId::random(), TraceId::random());
    assert_ne!(a, b);
    assert_ne!(a.0, [0; 16]);
    let id = TraceId([
        0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47,
        0x36,
    ]);
    assert_eq!(id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(id.hex(), id.to_string());
    let span = SpanId([0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
    assert_eq!(span.to_string(), "00f067aa0ba902b7");
    assert_eq!(SpanId::random().to_string().len(), 16);
}

#[test]
fn each_thread_draws_its_own_ids() {
    // Threads seed their generators apart: no id repeats within or across them.
    let draw = || (0..10_000).map(|_| SpanId::random()).collect::<Vec<_>>();
    let other = std::thread::spawn(draw).join().unwrap();
    let mut all = draw();
    all.extend(other);
    let n = all.len();
    all.sort_by_key(|id| id.0);
    all.dedup();
    assert_eq!(all.len(), n);
}

#[test]
fn ticks_become_the_unix_time_they_were_read_at() {
    let unix_now = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    let before = unix_now();
    let start = Ticks::now();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let end = Ticks::now();
    let after = unix_now();
    // Read later, as the exporter reads its anchor at export.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let anchor = Anchor::now();
    let (start_ns, end_ns) = (anchor.unix_ns(start), anchor.unix_ns(end));
    // A millisecond either way: the wall clock is read apart from the counter.
    let slack = 1_000_000;
    assert!(before - slack <= start_ns, "{before} {start_ns}");
    assert!(end_ns <= after + slack, "{end_ns} {after}");
    let took = end_ns - start_ns;
    assert!(
        49_000_000 <= took && took <= after - before + slack,
        "{took} ns for a 50 ms sleep the wall clock saw take {} ns",
        after - before
    );
    // A moment after the anchor (another core's counter) is after it, not clamped to it.
    let later = Ticks::now();
    assert!(anchor.unix_ns(later) >= anchor.unix_ns(end));
}

#[test]
fn a_shared_set_is_encoded_once_and_kept() {
    let set = Shared::leak(vec![("http.response.status_code", 200u16.into())]);
    let mut encodings = 0;
    for _ in 0..3 {
        let encoded = set.encoded(|attributes| {
            encodings += 1;
            vec![attributes.len() as u8].into_boxed_slice()
        });
        assert_eq!(encoded, [1]);
    }
    assert_eq!(encodings, 1);
}
