"""``openssl x509``: a certificate's expiry, names and issuer are a read-only
``host_bash`` command, even where certificates lie beside their keys — and it
never prints a key, given a key, a combined key + certificate file or any other
file; every other openssl shape is a proposal or refused."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from ongrid_host.bash_policy import analyze

from tests.host.conftest import Caller, make_tools

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")


@pytest.fixture
def tls(tmp_path):
    """A key, its self-signed certificate, a file holding both (haproxy's layout), and a
    letsencrypt-like ``live`` link into ``archive`` named ``privkey``/``cert``."""
    key, cert = tmp_path / "privkey1.pem", tmp_path / "cert1.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-subj", "/CN=db.example.internal", "-days", "30"], check=True, capture_output=True)
    both = tmp_path / "site.pem"
    both.write_text(key.read_text() + cert.read_text())
    (tmp_path / "live").mkdir()
    (tmp_path / "live" / "cert.pem").symlink_to(cert)
    (tmp_path / "evil.crt").symlink_to("/etc/shadow")
    return tmp_path


def _key_lines(path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line and "-----" not in line]


def test_shapes(tls):
    read = {
        f"openssl x509 -in {tls}/live/cert.pem -noout -enddate":
            ("openssl", "x509", "-noout", "-in", f"{tls}/live/cert.pem", "-enddate"),
        f"openssl x509 -in {tls}/site.pem -subject -ext subjectAltName -checkend 86400":
            ("openssl", "x509", "-noout", "-in", f"{tls}/site.pem", "-subject", "-ext", "subjectAltName",
             "-checkend", "86400"),
        f"openssl x509 -in {tls}/privkey1.pem -noout -text":
            ("openssl", "x509", "-noout", "-in", f"{tls}/privkey1.pem", "-text"),
    }
    for cmd, argv in read.items():
        verdict = analyze(cmd)
        assert (verdict.kind, verdict.argv) == ("read", argv), (cmd, verdict)
    others = [
        (f"openssl x509 -in {tls}/evil.crt -noout", "refused", "resolves to /etc/shadow"),
        ("openssl x509 -in /etc/shadow -noout", "refused", "/etc/shadow"),
        ("openssl x509 -in /proc/1/environ -noout", "refused", "environ"),
        ("openssl x509 -in /dev/zero -noout", "refused", "/dev"),
        ("openssl x509 -noout -enddate", "refused", "standard input"),
        ("openssl x509 -in - -noout", "refused", "standard input"),
        ("openssl x509 -in file:/etc/shadow -noout", "refused", "URI"),
        (f"openssl x509 -in {tls}/cert1.pem -checkend soon", "refused", "expected seconds"),
        (f"openssl x509 -in {tls}/cert1.pem -in {tls}/site.pem", "refused", "twice"),
        (f"openssl x509 -in {tls}/site.crt -out /tmp/x.crt", "write", "'-out' is not a read-only option"),
        (f"openssl x509 -in {tls}/site.crt -engine foo", "write", "'-engine' is not a read-only option"),
        ("openssl s_client -connect 127.0.0.1:443", "write", "only 'openssl x509' is read-only"),
        # off the shape, a change naming a key is refused, not proposed
        (f"openssl rsa -in {tls}/privkey1.pem", "refused", "PEM file"),
        (f"openssl x509 -in {tls}/cert1.pem --text", "refused", "PEM file"),
    ]
    for cmd, kind, why in others:
        verdict = analyze(cmd)
        assert verdict.kind == kind and why in verdict.reason, (cmd, verdict)


async def test_it_prints_a_certificates_fields_and_never_its_key(tls):
    call = Caller(make_tools())
    result = await call("host_bash", {"cmd": f"openssl x509 -in {tls}/site.pem -enddate -subject",
                                      "reason": "when does the certificate expire"}, read_only=True)
    assert result["exit_code"] == 0, result
    assert "notAfter=" in result["stdout"] and "db.example.internal" in result["stdout"]
    text = (await call("host_bash", {"cmd": f"openssl x509 -in {tls}/live/cert.pem -text", "reason": "all of it"},
                       read_only=True))["stdout"]
    assert "Validity" in text and "PRIVATE KEY" not in text
    # a key alone: not a certificate; not a line of it comes back
    key = await call("host_bash", {"cmd": f"openssl x509 -in {tls}/privkey1.pem -text", "reason": "probe"},
                     read_only=True)
    assert key["exit_code"] != 0
    shown = key["stdout"] + key["stderr"]
    assert "Could not read certificate" in shown or "unable to load certificate" in shown.lower()
    assert not any(line in shown for line in _key_lines(tls / "privkey1.pem"))
