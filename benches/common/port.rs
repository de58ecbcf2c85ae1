//! A free local port, for the benchmarks that start servers.

/// A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
