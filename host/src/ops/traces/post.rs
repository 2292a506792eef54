//! How the exporter posts a batch: over one kept-alive HTTP/1.1 connection that the exporter's
//! own thread writes and reads, for a plain `http://` collector (the usual local agent or
//! sidecar); through `reqwest` for `https://`.
//!
//! `reqwest::blocking` runs a runtime thread of its own and hands every request to it and
//! the answer back, a wake-up and a switch each way, on the cores that serve requests. A
//! POST of a protobuf body and a drained answer need none of that.

use std::io::{BufRead, BufReader, IoSlice, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{HeaderMap, CONTENT_TYPE};

/// The longest answer head (status line and headers) read before the answer is refused.
const MAX_HEAD: usize = 64 * 1024;

/// Posts batches to the collector.
pub(super) enum Poster {
    Plain(Plain),
    Client {
        client: reqwest::blocking::Client,
        endpoint: String,
        headers: HeaderMap,
    },
}

impl Poster {
    /// The poster for `endpoint` (already checked to be an http or https URL).
    pub fn new(endpoint: &str, headers: &HeaderMap, timeout: Duration) -> Self {
        match Plain::new(endpoint, headers, timeout) {
            Some(plain) => Self::Plain(plain),
            None => Self::Client {
                client: reqwest::blocking::Client::builder()
                    .timeout(timeout)
                    .build()
                    .unwrap_or_default(),
                endpoint: endpoint.to_owned(),
                headers: headers.clone(),
            },
        }
    }

    /// Posts one body; the error says what went wrong, never with the headers' values.
    pub fn post(&mut self, body: Bytes) -> Result<(), String> {
        match self {
            Self::Plain(plain) => match plain.post(&body)? {
                200..=299 => Ok(()),
                status => Err(format!("the collector answered {status}")),
            },
            Self::Client {
                client,
                endpoint,
                headers,
            } => {
                let answer = client
                    .post(endpoint.as_str())
                    .headers(headers.clone())
                    .header(CONTENT_TYPE, "application/x-protobuf")
                    .body(body)
                    .send();
                match answer {
                    Ok(r) if r.status().is_success() => Ok(()),
                    Ok(r) => Err(format!("the collector answered {}", r.status())),
                    Err(e) => Err(e.without_url().to_string()),
                }
            }
        }
    }
}

/// A plain HTTP/1.1 connection to the collector, opened when first needed and again after
/// the collector closes it.
pub(super) struct Plain {
    /// `host:port`, as connected to.
    authority: String,
    /// The request up to the body's length: request line, host, content type, the
    /// configured headers, and `content-length: `.
    head: Vec<u8>,
    timeout: Duration,
    connection: Option<BufReader<TcpStream>>,
}

impl Plain {
    /// A poster for an `http://` endpoint; None for any other.
    fn new(endpoint: &str, headers: &HeaderMap, timeout: Duration) -> Option<Self> {
        let url = reqwest::Url::parse(endpoint).ok()?;
        if url.scheme() != "http" {
            return None;
        }
        let host = url.host_str()?;
        let authority = format!("{host}:{}", url.port_or_known_default()?);
        let target = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        };
        let mut head = format!(
            "POST {target} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/x-protobuf\r\n"
        )
        .into_bytes();
        for (name, value) in headers {
            head.extend_from_slice(name.as_str().as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"content-length: ");
        Some(Self {
            authority,
            head,
            timeout,
            connection: None,
        })
    }

    /// Posts `body`; the answer's status. A kept-alive connection the collector has closed
    /// meanwhile is found out on the first attempt, so that one is made again once.
    fn post(&mut self, body: &[u8]) -> Result<u16, String> {
        let reused = self.connection.is_some();
        match self.exchange(body) {
            Err(_) if reused => {
                self.connection = None;
                self.exchange(body)
            }
            answer => answer,
        }
        .inspect_err(|_| self.connection = None)
    }

    fn exchange(&mut self, body: &[u8]) -> Result<u16, String> {
        if self.connection.is_none() {
            self.connection = Some(BufReader::new(self.connect()?));
        }
        let connection = self.connection.as_mut().expect("connected above");
        let length = format!("{}\r\n\r\n", body.len());
        write_all(
            connection.get_mut(),
            &mut [
                IoSlice::new(&self.head),
                IoSlice::new(length.as_bytes()),
                IoSlice::new(body),
            ],
        )
        .map_err(|e| format!("sending to {}: {e}", self.authority))?;
        let answer = read_answer(connection).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => e.to_string(),
            _ => format!("reading the answer of {}: {e}", self.authority),
        })?;
        if answer.close {
            self.connection = None;
        }
        Ok(answer.status)
    }

    fn connect(&self) -> Result<TcpStream, String> {
        let addresses = self
            .authority
            .to_socket_addrs()
            .map_err(|e| format!("resolving {}: {e}", self.authority))?;
        let mut last = format!("{} resolves to no address", self.authority);
        for address in addresses {
            match TcpStream::connect_timeout(&address, self.timeout) {
                Ok(stream) => {
                    let set = stream
                        .set_nodelay(true)
                        .and_then(|()| stream.set_read_timeout(Some(self.timeout)))
                        .and_then(|()| stream.set_write_timeout(Some(self.timeout)));
                    return set.map(|()| stream).map_err(|e| e.to_string());
                }
                Err(e) => last = format!("connecting to {}: {e}", self.authority),
            }
        }
        Err(last)
    }
}

/// Writes every slice, however the kernel splits the writes.
fn write_all(stream: &mut TcpStream, mut slices: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    while !slices.is_empty() {
        match stream.write_vectored(slices) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What the exporter keeps of an answer.
struct Answer {
    status: u16,
    /// The collector will close the connection (or did not say how long the body is).
    close: bool,
}

/// Reads one answer and drains its body (by its length, its chunks, or to the end), so the
/// connection is ready for the next request. An interim `1xx` answer is skipped.
fn read_answer(reader: &mut BufReader<TcpStream>) -> std::io::Result<Answer> {
    let invalid = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    loop {
        let mut head = 0;
        let mut line = Vec::new();
        let status_line = read_line(reader, &mut line, &mut head)?;
        let status: u16 = std::str::from_utf8(status_line)
            .ok()
            .filter(|l| l.starts_with("HTTP/1."))
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| invalid("the collector's answer is not HTTP/1.x"))?;
        let http10 = status_line.starts_with(b"HTTP/1.0");
        let (mut length, mut chunked, mut close) = (None, false, http10);
        loop {
            let header = read_line(reader, &mut line, &mut head)?;
            if header.is_empty() {
                break;
            }
            let Some((name, value)) = std::str::from_utf8(header)
                .ok()
                .and_then(|h| h.split_once(':'))
            else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(
                    value
                        .parse::<u64>()
                        .map_err(|_| invalid("the collector's content-length is not a number"))?,
                );
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.to_ascii_lowercase().ends_with("chunked");
            } else if name.eq_ignore_ascii_case("connection") {
                let value = value.to_ascii_lowercase();
                close = value.contains("close") || (http10 && !value.contains("keep-alive"));
            }
        }
        if (100..200).contains(&status) {
            continue;
        }
        if status == 204 || status == 304 {
            // No body, whatever the headers say.
        } else if chunked {
            drain_chunks(reader, &mut line, &mut head)?;
        } else if let Some(n) = length {
            let drained = std::io::copy(&mut reader.by_ref().take(n), &mut std::io::sink())?;
            if drained < n {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        } else {
            // No length: the body runs to the end of the connection.
            std::io::copy(reader, &mut std::io::sink())?;
            close = true;
        }
        return Ok(Answer { status, close });
    }
}

/// Skips a chunked body and its trailers.
fn drain_chunks(
    reader: &mut BufReader<TcpStream>,
    line: &mut Vec<u8>,
    head: &mut usize,
) -> std::io::Result<()> {
    let invalid = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    loop {
        *head = 0;
        let size_line = read_line(reader, line, head)?;
        let size = std::str::from_utf8(size_line)
            .ok()
            .map(|l| l.split(';').next().unwrap_or_default().trim())
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            .ok_or_else(|| invalid("the collector's chunk size is not hexadecimal"))?;
        if size == 0 {
            // Trailers, up to the empty line.
            while !read_line(reader, line, head)?.is_empty() {}
            return Ok(());
        }
        // The chunk, then its CRLF.
        let n = size + 2;
        if std::io::copy(&mut reader.by_ref().take(n), &mut std::io::sink())? < n {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
}

/// One line without its CRLF, in `line`; `head` counts the bytes an answer's head has taken
/// so far, against [`MAX_HEAD`].
fn read_line<'a>(
    reader: &mut BufReader<TcpStream>,
    line: &'a mut Vec<u8>,
    head: &mut usize,
) -> std::io::Result<&'a [u8]> {
    line.clear();
    let room = MAX_HEAD.saturating_sub(*head) as u64 + 1;
    reader.by_ref().take(room).read_until(b'\n', line)?;
    if line.last() != Some(&b'\n') {
        return Err(if line.len() as u64 >= room {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the collector's answer head is too long",
            )
        } else {
            std::io::ErrorKind::UnexpectedEof.into()
        });
    }
    *head += line.len();
    let end = line.len() - if line.ends_with(b"\r\n") { 2 } else { 1 };
    Ok(&line[..end])
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use poem::http::StatusCode;
    use poem::listener::{Acceptor as _, Listener as _};
    use poem::web::Data;
    use poem::{handler, post, Body, EndpointExt as _, Request, Response, Route};
    use reqwest::header::{HeaderName, HeaderValue};

    use super::*;

    /// What the collector saw of each request: path, body length, content type, `x-team`.
    type Seen = Arc<Mutex<Vec<(String, usize, String, Option<String>)>>>;

    /// Answers by path, each in one of the ways a real HTTP server frames an answer.
    #[handler]
    async fn collect(req: &Request, body: Body, seen: Data<&Seen>) -> Response {
        let bytes = body.into_vec().await.unwrap();
        let path = req.uri().path().to_owned();
        let header = |name: &str| req.header(name).map(str::to_owned);
        seen.lock().unwrap().push((
            path.clone(),
            bytes.len(),
            header("content-type").unwrap_or_default(),
            header("x-team"),
        ));
        match path.as_str() {
            // No length known: hyper sends it chunked.
            "/chunked" => {
                Response::builder().body(Body::from_async_read(std::io::Cursor::new(vec![
                    b'x';
                    70_000
                ])))
            }
            "/close" => Response::builder()
                .header("connection", "close")
                .body("bye"),
            "/fail" => Response::builder()
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .body("later"),
            _ => Response::builder()
                .content_type("application/x-protobuf")
                .body(vec![0u8; 3]),
        }
    }

    /// A poem (hyper) server on a loopback port, on a runtime of its own.
    fn collector() -> (String, Seen) {
        let seen = Seen::default();
        let kept = seen.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let acceptor = poem::listener::TcpListener::bind("127.0.0.1:0")
                    .into_acceptor()
                    .await
                    .unwrap();
                let addr = *acceptor.local_addr()[0].as_socket_addr().unwrap();
                tx.send(addr).unwrap();
                let app = Route::new().at("/*path", post(collect)).data(kept);
                poem::Server::new_with_acceptor(acceptor)
                    .run(app)
                    .await
                    .unwrap();
            });
        });
        (format!("http://{}", rx.recv().unwrap()), seen)
    }

    fn plain(base: &str, path: &str) -> Poster {
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("x-team"),
            HeaderValue::from_static("data"),
        );
        let poster = Poster::new(&format!("{base}{path}"), &headers, Duration::from_secs(5));
        assert!(matches!(poster, Poster::Plain(_)));
        poster
    }

    fn body(n: usize) -> Bytes {
        Bytes::from((0..n).map(|i| i as u8).collect::<Vec<_>>())
    }

    #[test]
    fn batches_reach_a_real_server_over_one_kept_alive_connection() {
        let (base, seen) = collector();
        let mut poster = plain(&base, "/v1/traces");
        for n in [0, 1, 200_000, 56_000] {
            poster.post(body(n)).unwrap();
        }
        let Poster::Plain(p) = &poster else {
            unreachable!()
        };
        let local = p
            .connection
            .as_ref()
            .unwrap()
            .get_ref()
            .local_addr()
            .unwrap();
        poster.post(body(10)).unwrap();
        let Poster::Plain(p) = &poster else {
            unreachable!()
        };
        // The same connection carried the next request too.
        assert_eq!(
            p.connection
                .as_ref()
                .unwrap()
                .get_ref()
                .local_addr()
                .unwrap(),
            local
        );
        let seen = seen.lock().unwrap();
        let lengths: Vec<usize> = seen.iter().map(|s| s.1).collect();
        assert_eq!(lengths, [0, 1, 200_000, 56_000, 10]);
        for (path, _, content_type, team) in seen.iter() {
            assert_eq!(path, "/v1/traces");
            assert_eq!(content_type, "application/x-protobuf");
            assert_eq!(team.as_deref(), Some("data"));
        }
    }

    #[test]
    fn chunked_and_closing_answers_leave_the_poster_ready_for_the_next_batch() {
        let (base, seen) = collector();
        let mut chunked = plain(&base, "/chunked");
        chunked.post(body(5)).unwrap();
        chunked.post(body(6)).unwrap();
        let mut closing = plain(&base, "/close");
        closing.post(body(7)).unwrap();
        let Poster::Plain(p) = &closing else {
            unreachable!()
        };
        assert!(
            p.connection.is_none(),
            "a closing answer drops the connection"
        );
        closing.post(body(8)).unwrap();
        let lengths: Vec<usize> = seen.lock().unwrap().iter().map(|s| s.1).collect();
        assert_eq!(lengths, [5, 6, 7, 8]);
    }

    #[test]
    fn failures_say_what_happened() {
        let (base, _) = collector();
        let err = plain(&base, "/fail").post(body(1)).unwrap_err();
        assert_eq!(err, "the collector answered 503");
        // Nothing listens on this port once its listener is dropped.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = plain(&format!("http://127.0.0.1:{port}"), "/v1/traces")
            .post(body(1))
            .unwrap_err();
        assert!(err.starts_with("connecting to 127.0.0.1:"), "{err}");
    }

    #[test]
    fn a_connection_the_collector_closed_while_idle_is_made_again() {
        // A collector that answers one request per connection without saying so, as a
        // server that times idle connections out does between two batches.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let served = Arc::new(Mutex::new(0));
        let count = served.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let mut reader = BufReader::new(conn);
                let mut length = 0;
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap() > 2 {
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap();
                    }
                    line.clear();
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                // Counted before answering: the poster returns as soon as it reads the
                // answer, and the test reads the count right after the last post.
                *count.lock().unwrap() += 1;
                reader
                    .get_mut()
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    .unwrap();
                // Dropped here: closed after the answer.
            }
        });
        let mut poster = plain(&base, "/v1/traces");
        for n in 1..=3 {
            std::thread::sleep(Duration::from_millis(50));
            poster.post(body(n)).unwrap();
        }
        assert_eq!(*served.lock().unwrap(), 3);
    }

    #[test]
    fn https_goes_through_reqwest() {
        let poster = Poster::new(
            "https://collector.example/v1/traces",
            &HeaderMap::new(),
            Duration::from_secs(1),
        );
        assert!(matches!(poster, Poster::Client { .. }));
    }
}
