"""talos-sim driven by a gRPC client that is not ours: grpclib (pure-Python HTTP/2 gRPC) over the
Python `ssl` module (OpenSSL), with stubs generated at test time from our own .proto files.

grpcio cannot be that client: its BoringSSL offers no Ed25519 signature algorithm, so its handshake
with an Ed25519 Talos certificate fails (it would against real Talos too). OpenSSL does Ed25519."""

import asyncio
import base64
import contextlib
import datetime
import gzip
import importlib
import io
import pathlib
import socket
import ssl
import subprocess
import sys
import tarfile
import types

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from google.protobuf import empty_pb2
from grpclib.client import Channel
from grpclib.config import Configuration
from grpclib.exceptions import GRPCError, StreamTerminatedError

from conftest import Ansible
from sim_cluster import converge
from talos_sim import start_sim

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "modules" / "proto" / "proto"
PORT = 50000
MACHINE_CONFIG = ("config", "MachineConfigs.config.talos.dev")


# ---------------------------------------------------------------------------------------------
# Stubs


@contextlib.contextmanager
def _generated_first_on_path(out):
    """Lets the generated top-level packages (machine, common, cosi, resource, ...) be imported
    even where a module of the same name exists (`resource` is in the standard library), then
    puts everything back so no other test sees them."""
    names = [p.name for p in out.iterdir() if p.is_dir() and p.name != "google"]
    saved = {n: m for n, m in sys.modules.items() if n.split(".")[0] in names}
    for n in saved:
        del sys.modules[n]
    sys.path.insert(0, str(out))
    try:
        yield
    finally:
        sys.path.remove(str(out))
        for n in [n for n in sys.modules if n.split(".")[0] in names]:
            del sys.modules[n]
        sys.modules.update(saved)


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    """protoc (from grpcio-tools) with grpclib's plugin over modules/proto/proto; a generation
    failure fails the tests."""
    out = tmp_path_factory.mktemp("stubs")
    protos = sorted(str(p.relative_to(PROTO_DIR)) for p in PROTO_DIR.rglob("*.proto"))
    assert protos, f"no .proto files under {PROTO_DIR}"
    plugin = pathlib.Path(sys.executable).parent / "protoc-gen-grpclib_python"
    assert plugin.is_file(), f"grpclib's protoc plugin is missing at {plugin}: run tools/setup-python"
    cmd = [
        sys.executable, "-m", "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"--python_out={out}",
        f"--grpclib_python_out={out}",
        f"--plugin=protoc-gen-grpclib_python={plugin}",
        *protos,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"stub generation failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
    # Regular packages, so that a same-named module elsewhere on sys.path can't win; `google` stays
    # a namespace package shared with protobuf's google.protobuf.
    for package in out.iterdir():
        if package.is_dir() and package.name != "google":
            (package / "__init__.py").touch()
    with _generated_first_on_path(out):
        mods = {
            name: importlib.import_module(name)
            for name in (
                "machine.machine_pb2", "machine.machine_grpc", "cosi.state_pb2", "cosi.state_grpc",
                "resource.config_pb2",
            )
        }
    return types.SimpleNamespace(
        m=mods["machine.machine_pb2"],
        machine=mods["machine.machine_grpc"].MachineServiceStub,
        cosi=mods["cosi.state_pb2"],
        state=mods["cosi.state_grpc"].StateStub,
        config=mods["resource.config_pb2"],
        empty=empty_pb2.Empty(),
    )


# ---------------------------------------------------------------------------------------------
# TLS and channels


def insecure_context():
    """What `talosctl --insecure` does: no client certificate, the server's not verified."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    return ctx


def mtls_context(ca_pem, cert_file=None, key_file=None):
    """The server verified against `ca_pem` (hostname = the dialled IP); a client certificate if given."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cadata=ca_pem)
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file)
    ctx.set_alpn_protocols(["h2"])
    return ctx


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


@contextlib.asynccontextmanager
async def channel(host, ctx):
    ch = Channel(host, PORT, ssl=ctx, config=Configuration(ssl_target_name_override=host))
    try:
        yield ch
    finally:
        ch.close()


async def collect(method, request, metadata=None):
    """All messages of a server-streaming call."""
    async with method.open(metadata=metadata, timeout=10) as stream:
        await stream.send_message(request, end=True)
        return [m async for m in stream]


def raw_tls_exchange(host, ctx):
    """Handshake, then send the HTTP/2 preface and read: with TLS 1.3 a server that refuses the
    client certificate says so in an alert that arrives after the client's side of the handshake."""
    with socket.create_connection((host, PORT), timeout=10) as tcp:
        with ctx.wrap_socket(tcp, server_hostname=host) as tls:
            tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            return tls.recv(1)


def pem_of(b64):
    return base64.b64decode(b64).decode()


def openssl_key(pem):
    # Talos labels its PKCS#8 Ed25519 keys `ED25519 PRIVATE KEY`; OpenSSL reads only `PRIVATE KEY`.
    return pem.replace("ED25519 PRIVATE KEY", "PRIVATE KEY")


def write_private(path, text):
    path.touch(mode=0o600)
    path.write_text(text)
    return str(path)


def issue_client_cert(directory, name, organization, issuer=None):
    """An Ed25519 client certificate (ExtKeyUsage exactly ClientAuth, roles in O like Talos's).
    Without `issuer` (cert, key) a fresh self-signed CA that no node knows issues it.
    Returns (ca_pem, cert_file, key_file)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    if issuer is None:
        ca_key = ed25519.Ed25519PrivateKey.generate()
        ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "talos")])
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=False,
                    encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .sign(ca_key, None)
        )
    else:
        ca_cert, ca_key = issuer
    key = ed25519.Ed25519PrivateKey.generate()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, None)
    )
    cert_file = directory / f"{name}.crt"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    key_file = write_private(directory / f"{name}.key", key_pem)
    return ca_cert.public_bytes(serialization.Encoding.PEM).decode(), str(cert_file), key_file


# ---------------------------------------------------------------------------------------------
# Maintenance mode


def test_maintenance_mode_with_an_insecure_connection(stubs, sim_factory, sample):
    sim = sim_factory(control_planes=1, workers=1)
    cp, worker = sim.nodes
    # A config rendered like upstream's base config names no install disk: Talos rejects it, so one
    # is added for the dry run.
    incomplete = sample.controlplane.read_bytes()
    install = b"    install:\n        wipe: false\n"
    assert incomplete.count(install) == 1
    config = incomplete.replace(install, b"    install:\n        disk: /dev/sda\n        wipe: false\n")

    async def scenario():
        async with channel(cp["address"], insecure_context()) as ch:
            api = stubs.machine(ch)
            version = await api.Version(stubs.empty, timeout=10)
            hostname = await api.Hostname(stubs.empty, metadata={"node": worker["address"]}, timeout=10)
            with pytest.raises(GRPCError) as invalid:
                await api.ApplyConfiguration(
                    stubs.m.ApplyConfigurationRequest(data=incomplete, dry_run=True), timeout=10
                )
            dry = await api.ApplyConfiguration(
                stubs.m.ApplyConfigurationRequest(
                    data=config, mode=stubs.m.ApplyConfigurationRequest.AUTO, dry_run=True
                ),
                timeout=10,
            )
            with pytest.raises(GRPCError) as denied:
                await collect(api.Kubeconfig, stubs.empty)
            return version, hostname, invalid.value, dry, denied.value

    version, hostname, invalid, dry, denied = run(scenario())

    [v] = version.messages
    assert v.version.tag == cp["version"] == "v1.13.6"
    assert (v.version.os, v.version.arch) == ("linux", "amd64")
    assert v.platform.name == "metal"
    assert not v.HasField("features"), "features must be absent in maintenance mode (api.md 5.4)"
    assert not v.HasField("metadata")
    # Node routing is disabled in maintenance: `node` is ignored and the endpoint answers itself.
    assert [h.hostname for h in hostname.messages] == [cp["hostname"]]
    assert invalid.status.name == "INVALID_ARGUMENT"
    assert "either install disk or diskSelector should be defined" in invalid.message
    [a] = dry.messages
    assert a.mode == stubs.m.ApplyConfigurationRequest.NO_REBOOT
    assert a.mode_details.startswith(
        "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\nConfig diff:\n"
    ), a.mode_details
    assert (denied.status.name, denied.message) == ("PERMISSION_DENIED", "not authorized")
    # The dry run changed nothing.
    assert sim.status()[0]["maintenance"] is True

    # The throw-away maintenance certificate, as seen by OpenSSL.
    with socket.create_connection((cp["address"], PORT), timeout=10) as tcp:
        with insecure_context().wrap_socket(tcp) as tls:
            assert tls.selected_alpn_protocol() == "h2"
            der = tls.getpeercert(binary_form=True)
    leaf = x509.load_der_x509_certificate(der)
    assert leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "maintenance-service.talos.dev"
    assert isinstance(leaf.public_key(), ed25519.Ed25519PublicKey)


# ---------------------------------------------------------------------------------------------
# Configured cluster, shared by the tests below


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("foreign-cluster")
    # The worker runs another version so that an answer routed to it is told from the endpoint's.
    sim = start_sim(control_planes=1, workers=1, node_versions={1: "v1.13.4"})
    try:
        info = converge(Ansible(workdir), sim, workdir, cluster_name="foreign")
        talosconfig = yaml.safe_load(info["talosconfig"].read_text())
        ctx = talosconfig["contexts"][talosconfig["context"]]
        info["ca"] = pem_of(ctx["ca"])
        info["crt"] = str(workdir / "admin.crt")
        (workdir / "admin.crt").write_text(pem_of(ctx["crt"]))
        info["key"] = write_private(workdir / "admin.key", openssl_key(pem_of(ctx["key"])))
        bundle = yaml.safe_load(info["secrets"].read_text())
        info["os_ca"] = (
            x509.load_pem_x509_certificate(pem_of(bundle["certs"]["os"]["crt"]).encode()),
            serialization.load_pem_private_key(openssl_key(pem_of(bundle["certs"]["os"]["key"])).encode(), None),
        )
        info["sim"] = sim
        info["dir"] = workdir
        info["nodes"] = {n["address"]: n for n in sim.status()}
        yield info
    finally:
        sim.stop()


def test_configured_node_over_mtls_and_routing(stubs, cluster):
    cp, worker = cluster["cps"][0], cluster["workers"][0]
    nodes = cluster["nodes"]
    assert not nodes[cp]["maintenance"] and not nodes[worker]["maintenance"]

    async def scenario():
        async with channel(cp, mtls_context(cluster["ca"], cluster["crt"], cluster["key"])) as ch:
            api = stubs.machine(ch)
            local = await api.Version(stubs.empty, timeout=10)
            routed = await api.Version(stubs.empty, metadata={"node": worker}, timeout=10)
            routed_name = await api.Hostname(stubs.empty, metadata={"node": worker}, timeout=10)
            fanned = await api.Hostname(stubs.empty, metadata={"nodes": worker}, timeout=10)
            return local, routed, routed_name, fanned

    local, routed, routed_name, fanned = run(scenario())

    [v] = local.messages
    assert v.version.tag == nodes[cp]["version"] == "v1.13.6"
    assert v.platform.name == "metal" and v.platform.mode == "metal"
    assert v.features.rbac is True
    assert not v.HasField("metadata"), "one-to-one replies carry no metadata (api.md 3.3)"
    # Routed through the control plane to the worker: the worker's own version and hostname.
    [r] = routed.messages
    assert r.version.tag == nodes[worker]["version"] == "v1.13.4"
    assert [h.hostname for h in routed_name.messages] == [nodes[worker]["hostname"]]
    assert nodes[worker]["hostname"] != nodes[cp]["hostname"]
    # One-to-many (`nodes`): apid names the target in the item's metadata.
    [f] = fanned.messages
    assert (f.metadata.hostname, f.hostname) == (worker, nodes[worker]["hostname"])


def test_server_streaming_and_the_stored_config_byte_for_byte(stubs, cluster):
    cp, worker = cluster["cps"][0], cluster["workers"][0]
    cosi = stubs.cosi

    async def scenario():
        async with channel(cp, mtls_context(cluster["ca"], cluster["crt"], cluster["key"])) as ch:
            machine, state = stubs.machine(ch), stubs.state(ch)
            kubeconfig = await collect(machine.Kubeconfig, stubs.empty)
            listed = await collect(
                state.List,
                cosi.ListRequest(namespace=MACHINE_CONFIG[0], type=MACHINE_CONFIG[1]),
                metadata={"node": worker},
            )
            got = await state.Get(
                cosi.GetRequest(namespace=MACHINE_CONFIG[0], type=MACHINE_CONFIG[1], id="v1alpha1"), timeout=10
            )
            return kubeconfig, listed, got

    kubeconfig, listed, got = run(scenario())

    # Kubeconfig: one Data message holding a gzip'd tar with one file `kubeconfig` (api.md 17).
    assert len(kubeconfig) == 1
    archive = b"".join(d.bytes for d in kubeconfig)
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(archive))) as tar:
        [member] = tar.getmembers()
        assert member.name == "kubeconfig" and member.mode == 0o600
        doc = yaml.safe_load(tar.extractfile(member).read())
    assert doc["current-context"] == "admin@foreign"
    assert doc["clusters"][0]["cluster"]["server"] == f"https://{cp}:6443"

    def config_bytes(resource):
        assert resource.metadata.annotations["talos.dev/yaml-spec"] == "1"
        return stubs.config.MachineConfigSpec.FromString(resource.spec.proto_spec).yaml_marshalled

    # COSI List (server-streaming), routed to the worker, and Get on the endpoint: the applied
    # files, byte for byte.
    by_id = {m.resource.metadata.id: m.resource for m in listed}
    assert "v1alpha1" in by_id, sorted(by_id)
    assert config_bytes(by_id["v1alpha1"]) == (cluster["dir"] / "cluster" / f"{worker}.yaml").read_bytes()
    assert config_bytes(got.resource) == (cluster["dir"] / "cluster" / f"{cp}.yaml").read_bytes()


def test_configured_node_refuses_clients_without_a_cluster_certificate(stubs, cluster, tmp_path):
    cp = cluster["cps"][0]
    foreign_ca, foreign_crt, foreign_key = issue_client_cert(tmp_path, "foreign", "os:admin")

    def refused(ctx):
        with pytest.raises(ssl.SSLError) as e:
            raw_tls_exchange(cp, ctx)
        return e.value.reason

    # The server refuses: no client certificate, then a certificate from a CA it doesn't know.
    assert refused(mtls_context(cluster["ca"])) == "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    assert refused(mtls_context(cluster["ca"], foreign_crt, foreign_key)) == "TLSV1_ALERT_UNKNOWN_CA"
    # The client refuses: the node's certificate is not from the CA it trusts.
    with pytest.raises(ssl.SSLCertVerificationError) as e:
        raw_tls_exchange(cp, mtls_context(foreign_ca, foreign_crt, foreign_key))
    # Both CAs are named O=talos, as every Talos OS CA is, so OpenSSL tries the foreign CA's key on
    # the node's certificate: "certificate signature failure" (7); "unable to get local issuer
    # certificate" (20) if the names differed or the certificate named its issuer's key id.
    assert e.value.reason == "CERTIFICATE_VERIFY_FAILED" and e.value.verify_code in (7, 20), e.value

    # Through grpclib the calls get no answer: the alert arrives after the client's side of the
    # handshake and grpclib reports the connection as lost.
    async def call(ctx):
        async with channel(cp, ctx) as ch:
            return await stubs.machine(ch).Version(stubs.empty, timeout=10)

    for ctx in (mtls_context(cluster["ca"]), mtls_context(cluster["ca"], foreign_crt, foreign_key)):
        with pytest.raises(StreamTerminatedError, match="Connection lost"):
            run(call(ctx))

    # A reader certificate from the cluster's own CA gets in, and is refused admin-only RPCs.
    _, reader_crt, reader_key = issue_client_cert(tmp_path, "reader", "os:reader", issuer=cluster["os_ca"])

    async def as_reader():
        async with channel(cp, mtls_context(cluster["ca"], reader_crt, reader_key)) as ch:
            version = await stubs.machine(ch).Version(stubs.empty, timeout=10)
            with pytest.raises(GRPCError) as denied:
                await collect(stubs.machine(ch).Kubeconfig, stubs.empty)
            return version, denied.value

    version, denied = run(as_reader())
    assert version.messages[0].version.tag == "v1.13.6"
    assert (denied.status.name, denied.message) == ("PERMISSION_DENIED", "not authorized")
