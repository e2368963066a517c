//! A blocking client of the control protocol: one connection per request.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::protocol::{KubeSnapshot, Reply, ReplyError, Request, StatusReply};

/// Talks to the control port of a running simulator.
#[derive(Clone, Debug)]
pub struct ControlClient {
    address: SocketAddr,
    connect_timeout: Duration,
    read_timeout: Duration,
}

impl ControlClient {
    pub fn new(address: SocketAddr) -> ControlClient {
        ControlClient {
            address,
            connect_timeout: Duration::from_secs(3),
            read_timeout: Duration::from_secs(10),
        }
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Sends one request and reads its reply; a refusal is an error with the simulator's reason.
    pub fn send(&self, request: &Request) -> Result<Reply> {
        let addr = self.address;
        let mut stream = TcpStream::connect_timeout(&addr, self.connect_timeout)
            .with_context(|| format!("cannot reach the control port {addr}"))?;
        stream.set_read_timeout(Some(self.read_timeout))?;
        stream
            .write_all(format!("{}\n", request.to_line()).as_bytes())
            .with_context(|| format!("cannot send to the control port {addr}"))?;
        let mut line = String::new();
        BufReader::new(stream)
            .read_line(&mut line)
            .with_context(|| format!("no answer on the control port {addr}"))?;
        match Reply::parse(request, &line) {
            Ok(reply) => Ok(reply),
            Err(ReplyError::Refused(e)) => bail!("{e}"),
            Err(e @ ReplyError::Malformed(_)) => {
                Err(anyhow::Error::new(e).context(format!("the control port {addr} answered")))
            }
        }
    }

    pub fn status(&self) -> Result<StatusReply> {
        match self.send(&Request::Status)? {
            Reply::Status(s) => Ok(*s),
            other => bail!("status answered {other:?}"),
        }
    }

    pub fn kube(&self) -> Result<KubeSnapshot> {
        match self.send(&Request::Kube)? {
            Reply::Kube(k) => Ok(*k),
            other => bail!("kube answered {other:?}"),
        }
    }
}
