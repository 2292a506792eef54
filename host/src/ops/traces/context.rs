//! Trace identity: ids, the W3C `traceparent` a caller sends, and the sampling decision a
//! trace's root makes for all of its spans.

pub use svc_trace::{SpanId, TraceId};

/// Where a trace continues from: a caller's span (from `traceparent`), or nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteParent {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    /// The caller's `sampled` flag.
    pub sampled: bool,
}

impl RemoteParent {
    /// A W3C `traceparent` value (`00-<trace id>-<span id>-<flags>`). Versions above `00`
    /// are read by the same layout, as the recommendation asks; `ff`, all-zero ids and
    /// malformed values are ignored, so the request starts a trace of its own.
    pub fn parse(value: &str) -> Option<Self> {
        let mut parts = value.trim().split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if version.len() != 2 || version.eq_ignore_ascii_case("ff") {
            return None;
        }
        u8::from_str_radix(version, 16).ok()?;
        if version == "00" && parts.next().is_some() {
            return None;
        }
        if trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
            return None;
        }
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        hex::decode_to_slice(trace, &mut trace_id).ok()?;
        hex::decode_to_slice(span, &mut span_id).ok()?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(Self {
            trace_id: TraceId(trace_id),
            span_id: SpanId(span_id),
            sampled: flags & 1 == 1,
        })
    }
}

/// Which traces are recorded (`OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`, the
/// standard variables). The decision is made once, at a trace's root, and every span of the
/// trace follows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampler {
    /// Follow a caller's `sampled` flag when there is a caller.
    parent_based: bool,
    /// The share of traces started here that are recorded, as a bound on the trace id's
    /// last eight bytes (u64::MAX: all).
    bound: u64,
    all: bool,
}

impl Default for Sampler {
    /// `parentbased_always_on`, the standard default.
    fn default() -> Self {
        Self {
            parent_based: true,
            bound: u64::MAX,
            all: true,
        }
    }
}

impl Sampler {
    /// The sampler the two variables name; an unknown name or a ratio outside 0..=1 is an
    /// error naming the variable.
    pub fn from_env(name: Option<&str>, arg: Option<&str>) -> Result<Self, String> {
        let ratio = || -> Result<f64, String> {
            match arg.map(str::trim).filter(|a| !a.is_empty()) {
                None => Ok(1.0),
                Some(a) => a
                    .parse::<f64>()
                    .ok()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .ok_or_else(|| {
                        format!("OTEL_TRACES_SAMPLER_ARG is '{a}'; it must be a ratio from 0 to 1")
                    }),
            }
        };
        let (parent_based, share) = match name.map(str::trim).unwrap_or("") {
            "" | "parentbased_always_on" => (true, 1.0),
            "always_on" => (false, 1.0),
            "always_off" => (false, 0.0),
            "parentbased_always_off" => (true, 0.0),
            "traceidratio" => (false, ratio()?),
            "parentbased_traceidratio" => (true, ratio()?),
            other => {
                return Err(format!(
                    "OTEL_TRACES_SAMPLER is '{other}'; it may be always_on, always_off, \
                     traceidratio or their parentbased_ forms"
                ))
            }
        };
        Ok(Self {
            parent_based,
            // The ratio as a share of the id space; 1.0 must keep every id.
            bound: (share * u64::MAX as f64) as u64,
            all: share >= 1.0,
        })
    }

    /// Whether a trace with this id, continued from `parent` if any, is recorded.
    pub fn samples(&self, trace_id: TraceId, parent: Option<&RemoteParent>) -> bool {
        match parent {
            Some(p) if self.parent_based => p.sampled,
            _ => {
                let low = u64::from_be_bytes(trace_id.0[8..].try_into().expect("8 bytes"));
                self.all || low < self.bound
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_is_read_by_the_w3c_layout_and_refused_when_malformed() {
        let p =
            RemoteParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(p.trace_id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(p.span_id.to_string(), "00f067aa0ba902b7");
        assert!(p.sampled);
        let unsampled =
            RemoteParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
        assert!(!unsampled.unwrap().sampled);
        // A later version may append fields.
        assert!(RemoteParent::parse(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later"
        )
        .is_some());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(RemoteParent::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn samplers_follow_the_standard_names_and_refuse_the_rest() {
        let id = TraceId::random();
        let caller = |sampled| RemoteParent {
            trace_id: id,
            span_id: SpanId::random(),
            sampled,
        };
        let default = Sampler::from_env(None, None).unwrap();
        assert!(default.samples(id, None));
        assert!(!default.samples(id, Some(&caller(false))));
        let on = Sampler::from_env(Some("always_on"), None).unwrap();
        assert!(on.samples(id, Some(&caller(false))));
        let off = Sampler::from_env(Some("parentbased_always_off"), None).unwrap();
        assert!(!off.samples(id, None));
        assert!(off.samples(id, Some(&caller(true))));

        let tenth = Sampler::from_env(Some("traceidratio"), Some("0.1")).unwrap();
        let kept = (0..10_000)
            .filter(|_| tenth.samples(TraceId::random(), None))
            .count();
        assert!((700..1300).contains(&kept), "{kept} of 10000 kept at 0.1");

        for (name, arg, variable) in [
            ("sometimes", None, "OTEL_TRACES_SAMPLER"),
            ("traceidratio", Some("1.5"), "OTEL_TRACES_SAMPLER_ARG"),
            ("traceidratio", Some("half"), "OTEL_TRACES_SAMPLER_ARG"),
        ] {
            let err = Sampler::from_env(Some(name), arg).unwrap_err();
            assert!(err.contains(variable), "{err}");
        }
    }
}
