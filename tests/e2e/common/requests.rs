//! What the clients and the scripted providers were sent, kept on disk when
//! `AGENT_AS_MODEL_REQUEST_LOG` names a folder (`scripts/client-matrix` sets it): under
//! `FOLDER/TEST/`, TEST the running test's name with `::` as `.`, one file a connection a client
//! opened to the server (`client-N.http`: the bytes it sent, as sent) and one a request a
//! scripted provider received (`provider-PORT-N.json`). Written as the bytes arrive, so a test
//! that fails, or is killed, leaves what its client had sent.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Numbers the files of this process, so no two share a name.
static NEXT: AtomicUsize = AtomicUsize::new(1);

/// The running test's folder of requests (made), or `None` when none is asked for. Called on
/// the test's own thread, which the test harness names after the test.
pub fn folder() -> Option<PathBuf> {
    let root = std::env::var_os("AGENT_AS_MODEL_REQUEST_LOG").filter(|v| !v.is_empty())?;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("unnamed").replace("::", ".");
    let dir = PathBuf::from(root).join(test);
    std::fs::create_dir_all(&dir).unwrap();
    Some(dir)
}

/// A new file name in `dir`: `PREFIX-N.EXT`.
pub fn file(dir: &std::path::Path, prefix: &str, ext: &str) -> PathBuf {
    dir.join(format!(
        "{prefix}-{:03}.{ext}",
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Carries one connection from a client to the server's `port` and back; with a `folder`, what
/// the client sent is kept there too.
pub async fn carry<S>(client: S, port: u16, folder: Option<PathBuf>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Ok(mut server) = TcpStream::connect(("127.0.0.1", port)).await else {
        return;
    };
    let Some(folder) = folder else {
        let mut client = client;
        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        return;
    };
    let mut kept = std::fs::File::create(file(&folder, "client", "http")).ok();
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut server_read, mut server_write) = server.into_split();
    let up = async {
        let mut buffer = vec![0u8; 64 * 1024];
        while let Ok(n) = client_read.read(&mut buffer).await {
            let Some(bytes) = buffer.get(..n).filter(|b| !b.is_empty()) else {
                break;
            };
            if let Some(file) = kept.as_mut() {
                let _ = file.write_all(bytes);
            }
            if server_write.write_all(bytes).await.is_err() {
                break;
            }
        }
        let _ = server_write.shutdown().await;
    };
    let down = async {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    };
    tokio::join!(up, down);
}

/// The port a test's clients should use for the server on `port`: with a folder of requests, a
/// port that carries each connection on to `port`, keeping what the client sent; else `port`.
pub async fn front(port: u16) -> u16 {
    let Some(folder) = folder() else {
        return port;
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(carry(client, port, Some(folder.clone())));
        }
    });
    front
}
