"""Which paths ``host_bash`` may read, judged by what they resolve to.

A path is checked twice: lexically (``//``, ``.`` and ``..`` collapsed,
relative paths joined to the folder the command runs in) and, on the local
host, physically (:func:`ongrid_host.realpath.resolve`: symlinks followed, so a
link to ``/etc/shadow`` is ``/etc/shadow``; a path that passes through a
process-specific link such as ``/proc/self/cwd`` is refused, and so is one
that cannot be resolved).  Either form landing in
a forbidden area refuses the command.

Forbidden areas: ``/proc``, ``/sys``, ``/dev`` (process environments hold the
daemon's API keys; devices never end), password and sudo files, ssh keys
(``/etc/ssh/*key*``, any ``.ssh`` folder), ``/etc/ssl/private``,
``/etc/ongrid``, the daemon's state folder and its config file.  A
*recursive* read is refused when its target is inside an area or contains
one (``grep -r x /etc`` would read ``/etc/shadow``).  A copy of an area
elsewhere — inside a container image's layer, a chroot, a backup
(``…/diff/etc/wireguard/wg0.conf``) — is one too: named in a path, and on the
local host also when a recursive read's folder holds one.  Container storage
(``/var/lib/docker`` and the like, where every image's own ``/etc`` lies) is
not read recursively at all, but for its volumes (applications' data).

**Safe kernel files** are the exception inside ``/proc`` and ``/sys``: the
files investigations need and that hold no secret (load, memory, pressure,
a process's ``status``/``stat``/``statm``/``limits``/``cgroup``, cgroup
``memory.*``/``cpu.*``/``io.*``/``pids.*`` statistics) — an explicit list of
path patterns (:data:`SAFE_KERNEL_FILES`).  A path passes only when *every*
form of it (lexical and real) is either outside the areas or one of those
files, so a symlink to ``/proc/self/environ`` or a walk through
``/proc/self/root/…``, ``/proc/1/cwd/…`` never passes.  Process
environments, command lines (they can hold tokens), memory, maps and file
descriptors stay refused.

On the local host, when the daemon runs as root, a regular file that others
may not read, and its group neither unless that is a log group (mode 0600,
0400, 0640 ``root:root``: how keys and password files are kept, whatever their
names), is refused too, except under ``/var/log``, and so is a recursive read
of a folder holding one;
run as another user, the commands read without the daemon's capabilities and
the kernel refuses such a file itself (``ongrid_host.runner.run_reduced``).

On a remote host symlinks cannot be followed from here, so only the lexical
check applies there, and a relative path with ``..`` (its folder is the ssh
user's home, not known here) is refused.
"""

from __future__ import annotations

import errno
import functools
import os
import posixpath
import pwd
import re
import stat
from collections.abc import Callable, Iterable, Iterator

import attrs

from ongrid_host.realpath import resolve
from ongridd.plugins.api import FILE_SCAN_BYTES, MIN_PIECE_CHARS, file_holds_secret, holds_any_secret

#: areas forbidden to read-only commands that a reviewed change may still name (see
#: :meth:`PathPolicy.change_problem`)
CHANGE_AREAS = ("/proc", "/sys", "/dev", "/var/lib/postgresql", "/var/lib/mysql", "/var/lib/docker/containers",
                "/var/lib/kubelet", "/var/lib/etcd", "/var/lib/rancher", "/var/lib/cloud", "/etc/kubernetes",
                "/etc/rancher", "/var/backups", "/var/lib/systemd/coredump", "/var/lib/AccountsService", "/var/lib/sss")
_PROCESS_SECRET = re.compile(r"/proc/(?:[^/]+/(?:task/[^/]+/)?(?:mem|environ)|kcore)\Z|/dev/(?:k?mem|port)\Z")


def _process_secret(form: str) -> bool:
    """A process's environment or memory, the kernel's, or physical memory."""
    return "environ" in form or _PROCESS_SECRET.search(form) is not None


#: (area, why) — reading anything at or under the area is refused
FIXED_AREAS: tuple[tuple[str, str], ...] = (
    ("/proc", "/proc (process environments, command lines and memory hold secrets; only the safe kernel "
              "files such as /proc/loadavg, /proc/meminfo, /proc/pressure/*, /proc/<pid>/status may be read)"),
    ("/sys", "/sys (kernel interfaces; only cgroup memory.*/cpu.*/io.*/pids.* statistics may be read)"),
    ("/dev", "/dev (devices: endless or raw data)"),
    ("/etc/shadow", "a password-hash file"),
    ("/etc/shadow-", "a password-hash file"),
    ("/etc/gshadow", "a password-hash file"),
    ("/etc/gshadow-", "a password-hash file"),
    ("/etc/sudoers", "the sudo policy"),
    ("/etc/sudoers.d", "the sudo policy"),
    ("/etc/ssl/private", "TLS private keys"),
    ("/etc/ongrid", "Ongrid's configuration (tokens)"),
    ("/root/.ssh", "ssh keys"),
    ("/etc/security/opasswd", "old password hashes"),
    ("/etc/letsencrypt", "TLS certificates and their private keys"),
    ("/etc/mysql/debian.cnf", "the MySQL maintenance password"),
    ("/etc/krb5.keytab", "Kerberos keys"),
    ("/etc/NetworkManager/system-connections", "network passwords"),
    ("/etc/wireguard", "WireGuard private keys"),
    ("/etc/ipsec.secrets", "IPsec secrets"),
    ("/etc/pki/tls/private", "TLS private keys"),
    ("/run/secrets", "container secrets"),
    ("/var/run/secrets", "container and Kubernetes service-account secrets"),
    ("/var/lib/docker/containers", "container configurations (environment variables)"),
    ("/var/lib/kubelet", "Kubernetes node credentials"),
    ("/etc/kubernetes", "Kubernetes credentials"),
    ("/var/lib/postgresql", "database files"),
    ("/var/lib/mysql", "database files"),
    ("/etc/rancher", "Kubernetes (k3s) credentials"),
    ("/var/lib/rancher", "Kubernetes (k3s) credentials"),
    ("/var/lib/cloud", "cloud-init user data (often credentials)"),
    ("/var/lib/etcd", "the cluster's key-value store"),
    ("/etc/ppp/chap-secrets", "PPP secrets"),
    ("/etc/ppp/pap-secrets", "PPP secrets"),
    ("/etc/postfix/sasl_passwd", "mail relay passwords"),
    ("/etc/ceph", "Ceph keyrings"),
    ("/var/lib/jenkins/secrets", "Jenkins secrets"),
    ("/var/backups", "system backups (daily copies of the password-hash, group and sudo files)"),
    ("/var/cache/debconf/passwords.dat", "package configuration passwords"),
    ("/etc/apt/auth.conf", "package repository passwords"),
    ("/etc/apt/auth.conf.d", "package repository passwords"),
    ("/var/lib/systemd/credential.secret", "the key of systemd's encrypted credentials"),
    ("/etc/credstore", "systemd service credentials"),
    ("/etc/credstore.encrypted", "systemd service credentials"),
    ("/var/lib/tailscale", "VPN node keys"),
    ("/etc/samba/smbpasswd", "SMB password hashes"),
    ("/var/lib/samba/private", "SMB and domain secrets"),
    ("/etc/wpa_supplicant", "Wi-Fi passwords"),
    ("/etc/sssd", "directory service bind passwords"),
    ("/etc/gitlab/gitlab-secrets.json", "GitLab's secrets"),
    ("/etc/gitlab-runner", "CI runner tokens"),
    ("/etc/openvpn", "VPN keys and passwords"),
    ("/etc/msmtprc", "mail relay passwords"),
    ("/etc/exim4/passwd.client", "mail relay passwords"),
    ("/etc/cups/ssl", "printing TLS keys"),
    ("/var/lib/sss", "cached directory credentials"),
    ("/var/lib/AccountsService", "user account data"),
    ("/var/lib/systemd/coredump", "core dumps (a crashed process's memory and environment)"),
)
#: outside these folders a regular file that neither its group nor others may read (mode 0600, 0400)
#: is refused on the local host when the daemon runs as root (:func:`_private_file_problem`): that is
#: how keys and password files are kept, whatever their names; logs under these folders are often
#: private too and are what an investigation reads
PRIVATE_FILES_READABLE_UNDER = ("/var/log",)
#: names, anywhere in a path, of folders and files that hold credentials
#: (users' homes: cloud, cluster, registry, database and shell-history secrets)
SECRET_NAMES: dict[str, str] = {
    ".ssh": "a .ssh folder (ssh keys)", ".aws": "cloud credentials", ".azure": "cloud credentials",
    ".kube": "Kubernetes credentials", ".docker": "registry credentials", ".gnupg": "GnuPG keys",
    ".pgpass": "database passwords", ".my.cnf": "database passwords", ".netrc": "login passwords",
    ".git-credentials": "git passwords", ".vault-token": "a Vault token", ".bash_history": "a shell history",
    ".zsh_history": "a shell history", ".psql_history": "a database shell history",
    ".mysql_history": "a database shell history", ".python_history": "a shell history", "gcloud": "cloud credentials",
    ".env": "an application's environment file", ".npmrc": "registry credentials", ".pypirc": "registry credentials",
    ".s3cfg": "cloud credentials", ".dockercfg": "registry credentials", ".terraform.d": "cloud credentials",
    "gh": "GitHub credentials", "rclone": "cloud credentials", ".sh_history": "a shell history",
    ".history": "a shell history", "fish_history": "a shell history", ".rediscli_history": "a shell history",
    ".node_repl_history": "a shell history", ".sqlite_history": "a shell history", ".dbshell": "a shell history",
    ".lesshst": "a pager history", ".viminfo": "an editor history", "secrets": "a secrets folder",
    "credentials": "a credentials file", "credentials.json": "a credentials file", "id_rsa": "an ssh key",
    "id_ed25519": "an ssh key", "id_ecdsa": "an ssh key", "id_dsa": "an ssh key", ".msmtprc": "mail passwords",
    ".git-credential-cache": "git passwords", ".password-store": "a password store", "restic-password":
    "a backup password", ".boto": "cloud credentials", ".passwd-s3fs": "cloud credentials",
    "passwd-s3fs": "cloud credentials", ".smbcredentials": "SMB passwords", "auth.json": "registry credentials",
    "clouds.yaml": "cloud credentials", "secure.yaml": "cloud credentials",
    ".terraformrc": "cloud credentials", "terraform.rc": "cloud credentials", "glab-cli": "GitLab credentials",
    "settings-security.xml": "Maven's master password", "credentials.d": "a credentials folder",
    "userlist.txt": "database passwords (pgbouncer)",
}
#: file names that hold credentials inside one folder only (Maven's ``~/.m2/settings.xml``, not the
#: jars and poms beside it)
SECRET_NAMES_IN: dict[tuple[str, str], str] = {(".m2", "settings.xml"): "Maven repository passwords"}
#: file-name endings of key and keystore files, anywhere
SECRET_SUFFIXES: dict[str, str] = {
    ".key": "a private key file", ".keyring": "a keyring", ".p12": "a key store", ".pfx": "a key store",
    ".jks": "a key store", ".keystore": "a key store", ".kdbx": "a password database", "_history": "a shell history",
    ".pem": "a PEM file (it may hold a private key)", ".asc": "an armored PGP file (it may hold a private key)",
    ".gpg": "a PGP file (a keyring or an encrypted secret)", ".ovpn": "a VPN profile (it may hold keys)",
    ".secret": "a secret", ".secrets": "a secret",
    ".journal": "a binary journal file (every field of every entry, a crashed process's environment among them); "
                "read it with journalctl", ".journal~": "a binary journal file (every field of every entry); read it "
                                                        "with journalctl",
}
#: what journalctl may read (``--file``): it prints only the fields its own allowlist lets through
JOURNAL_NAMES = frozenset({SECRET_SUFFIXES[".journal"], SECRET_SUFFIXES[".journal~"]})
#: beginnings of file names, anywhere, of secrets and of their copies (``shadow.bak``,
#: ``shadow~``, ``sudoers.dpkg-old``, a key copied out of ``.ssh``); a ``.pub`` file is not one
SECRET_PREFIXES: dict[str, str] = {
    "shadow": "a password-hash file or a copy of one", "gshadow": "a password-hash file or a copy of one",
    "sudoers": "the sudo policy or a copy of it", "opasswd": "old password hashes",
    "id_rsa": "an ssh key", "id_ed25519": "an ssh key", "id_ecdsa": "an ssh key",
    "id_dsa": "an ssh key", "privkey": "a private key file", "htpasswd": "web server password hashes",
    "sasl_passwd": "mail relay passwords",
    # a host key's copy anywhere (a chroot's, a backup's /etc/ssh): ssh_host_ed25519_key, …_key.old
    "ssh_host_": "an ssh host key or a copy of one",
}
#: parts of file names that say credentials (``cifs-credentials``, ``aws_credentials.bak``)
SECRET_INFIXES: dict[str, str] = {"credential": "a credentials file"}
#: where packaged programs and their documentation live: a file there named like a secret is code, a
#: manual or an example (``botocore/credentials.py``, ``htpasswd.1.gz``, ``shadow.5.gz``), so the
#: name-part rules (prefixes, infixes) do not apply under them
PACKAGED = ("/usr/share", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/include", "/usr/src")
#: where container engines keep images and containers: every image's own /etc (its password hashes,
#: keys, a cluster's credentials) lies somewhere under them, so they are not read recursively —
#: but for the volumes, applications' own data (their logs)
CONTAINER_STORAGE = ("/var/lib/docker", "/var/lib/containerd", "/var/lib/containers", "/var/lib/podman")
CONTAINER_VOLUMES = ("/var/lib/docker/volumes", "/var/lib/containers/storage/volumes")
#: the same, rootless, under a user's home (name parts of a path)
_ROOTLESS_STORAGE = ("/.local/share/containers", "/.local/share/docker")
_CG = r"/sys/fs/cgroup(/[A-Za-z0-9_.:@+-]+)*"
#: files inside /proc and /sys a read-only persona may read (full matches of
#: the normalised path; no component may be '.' or '..', see normalize())
SAFE_KERNEL_FILES: tuple[re.Pattern[str], ...] = tuple(re.compile(p) for p in (
    r"/proc/(loadavg|meminfo|stat|uptime|vmstat|cpuinfo|version|swaps|diskstats)",
    r"/proc/pressure/(cpu|memory|io)",
    r"/proc/([0-9]+|self)/(status|stat|statm|limits|cgroup|oom_score|io)",
    _CG + r"/(memory\.(current|max|high|low|min|peak|stat|pressure|events|events\.local|swap\.current|"
          r"swap\.max|numa_stat)|cpu\.(stat|max|pressure|weight)|io\.(stat|pressure)|pids\.(current|max))",
))


def safe_kernel_file(path: str) -> bool:
    """True when the normalised ``path`` is one of :data:`SAFE_KERNEL_FILES`."""
    return "environ" not in path and any(p.fullmatch(path) for p in SAFE_KERNEL_FILES)


#: folders holding secrets by name (reading the folder recursively is refused)
_KEY_FOLDERS = ("/etc/ssh",)


def normalize(path: str, cwd: str | None) -> str:
    """``path`` joined to ``cwd`` (when relative and cwd is known), with
    ``.``/``..`` and repeated slashes collapsed (``//proc`` → ``/proc``)."""
    if cwd is not None and not path.startswith("/"):
        path = posixpath.join(cwd, path)
    norm = posixpath.normpath(path)
    if norm.startswith("//"):
        norm = "/" + norm.lstrip("/")
    return norm


def _under(path: str, root: str) -> bool:
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")



def _secret_names(form: str) -> Iterator[str]:
    """What secrets ``form`` names by its file or folder names (in any case), in the order of
    the rules below."""
    parts = form.lower().split("/")  # names in any case: .ENV, server.KEY, ID_RSA
    for part in parts:
        if part in SECRET_NAMES:
            yield SECRET_NAMES[part]
    base = parts[-1]
    if len(parts) > 1 and (parts[-2], base) in SECRET_NAMES_IN:
        yield SECRET_NAMES_IN[(parts[-2], base)]
    for suffix, why in SECRET_SUFFIXES.items():
        if base.endswith(suffix):
            yield why
    if base.startswith("ssh_host_") and not base.endswith(".pub"):  # a host key's copy, packaged folders too
        yield SECRET_PREFIXES["ssh_host_"]
    if any(_under(form, folder) for folder in PACKAGED):
        return
    for infix, why in SECRET_INFIXES.items():
        if infix in base:
            yield why
    if not base.endswith(".pub"):
        bare = base.lstrip(".")  # an editor's swap file of it: .shadow.swp
        for prefix, why in SECRET_PREFIXES.items():
            if bare.startswith(prefix):
                yield why
    if any(_under(form, k) for k in _KEY_FOLDERS) and "key" in base:
        yield "an ssh host key"
    if base == "fss" and len(parts) > 2 and parts[-3] == "journal":
        yield "the journal's sealing key"


def _secret_by_name(form: str, skip: frozenset[str] = frozenset()) -> str | None:
    """What secret ``form`` names by its file or folder names, or None; a reason in ``skip``
    does not count."""
    return next((why for why in _secret_names(form) if why not in skip), None)


#: where TLS certificates live beside their keys, and the names of TLS material: what
#: ``openssl x509`` may read (:meth:`PathPolicy.certificate_problem`) — it prints a certificate's
#: fields and never a key
TLS_AREAS = ("/etc/ssl/private", "/etc/letsencrypt", "/etc/pki/tls/private", "/etc/cups/ssl", "/etc/kubernetes/pki",
             "/var/lib/kubelet/pki")
TLS_NAMES = frozenset({SECRET_SUFFIXES[".pem"], SECRET_SUFFIXES[".key"], SECRET_PREFIXES["privkey"]})


@attrs.frozen
class PathPolicy:
    """Where commands run and what they may not read.

    ``cwd``: the folder the command runs in (None: unknown, a remote home).
    ``resolve``: follow symlinks (:func:`ongrid_host.realpath.resolve`; local host only).
    ``areas``: (path, why) pairs of forbidden areas (see the module docstring).
    """

    cwd: str | None = "/"
    resolve: bool = True
    areas: tuple[tuple[str, str], ...] = FIXED_AREAS

    @classmethod
    def local(cls, *, extra: Iterable[tuple[str, str]] = (), cwd: str = "/") -> PathPolicy:
        """The policy for this host: the fixed areas, every local user's
        ``~/.ssh`` (from the password database) and ``extra`` (state dir…),
        each also by its real path."""
        areas = list(FIXED_AREAS) + list(extra)
        try:
            homes = {u.pw_dir for u in pwd.getpwall() if u.pw_dir.startswith("/") and u.pw_dir != "/"}
        except OSError:  # pragma: no cover - no passwd database
            homes = set()
        areas += [(posixpath.join(h, ".ssh"), "ssh keys") for h in sorted(homes)]
        both = []
        for area, why in areas:
            both.append((normalize(area, cwd), why))
            real = os.path.realpath(area)
            if real != area:
                both.append((real, why))
        return cls(cwd=cwd, resolve=True, areas=tuple(dict.fromkeys(both)))

    @classmethod
    def remote(cls) -> PathPolicy:
        """The policy for a host reached over ssh (lexical checks only)."""
        return cls(cwd=None, resolve=False, areas=FIXED_AREAS)

    def forms(self, path: str, always_resolve: bool = False) -> tuple[str | None, list[str]]:
        """(problem, the forms of ``path`` to check): as written, and (locally) where it leads —
        not for a spelling already forbidden, which is reported as such, unless
        ``always_resolve``."""
        if self.cwd is None and ".." in path.split("/"):
            # on a remote host links cannot be followed: /run/shm/../vcs is /dev/vcs there, not /run/vcs
            return (f"path '{path}' with '..' cannot be checked on a remote host (a link before it may lead "
                    "anywhere, and a relative one starts in the ssh user's home); write the path without '..'"), []
        lex = normalize(path, self.cwd)
        out = [lex]
        if self.resolve and (always_resolve or self._area_of(lex) is None):
            # resolved as the kernel walks it: a '..' after a link leaves the link's target, not the
            # link's folder (/run/shm/../vcs is /dev/vcs), so the path is not collapsed first
            raw = path if path.startswith("/") else posixpath.join(self.cwd or os.getcwd(), path)
            try:
                resolved = resolve(raw)
            except (OSError, ValueError) as exc:  # fail closed: where it leads is unknown
                why = getattr(exc, "strerror", None) or str(exc)
                return (f"path '{path}' cannot be resolved ({why}), so what it would read cannot be "
                        "checked"), []
            if resolved.process_link is not None:
                return (f"path '{path}' passes through {resolved.process_link}, a process's own view of the files "
                        "(a link that points somewhere else for the command than for Ongrid), so what it would "
                        "read cannot be checked"), []
            real = resolved.real
            if real not in out:
                out.append(real)
        return None, out

    def _area_of(self, form: str, exempt: tuple[str, ...] = (), skip_names: frozenset[str] = frozenset()) -> str | None:
        """What forbidden area or secret ``form`` is in, or None; an area under one of ``exempt``
        does not count (its secrets by name still do, but for the reasons in ``skip_names``)."""
        if "environ" in form:
            return "a process environment"
        if safe_kernel_file(form):
            return None
        for area, why in self.areas:
            if _under(form, area) and not any(_under(form, e) for e in exempt):
                return f"{area}: {why}" if area not in why else why
        for area, why in self.areas:  # a copy of the area inside a container image, a chroot, a backup
            if area.count("/") > 1 and area not in exempt and (form + "/").find(area.rstrip("/") + "/", 1) > 0:
                return f"a copy of {area}: {why}"
        return _secret_by_name(form, skip_names)

    def change_problem(self, path: str) -> str | None:
        """Why a command that is not read-only (one the review gate would be asked about) may not
        name ``path``, or None: ``path`` holds secrets only — a key, a password file, a process's
        environment or memory, Ongrid's own configuration and state.  The areas that are forbidden
        to read-only commands for what else they hold (devices, kernel files, database and
        container folders, backups) and private files are a change's usual business
        (``mount /dev/sdb1 /mnt``, ``truncate -s0 /var/lib/docker/containers/…-json.log``,
        ``chmod 600 …``), so they stay for the reviewer.  On the local host a file that holds one
        of the daemon's own secrets is refused too, whatever the command does with it."""
        # where it leads counts even when spelled inside an area a change may name: /proc/1/root/etc/shadow,
        # a link planted in /dev/shm
        problem, forms = self.forms(path, always_resolve=True)
        if problem:
            return problem
        for form in forms:
            area = "a process's or the machine's memory" if _process_secret(form) else self._area_of(form, CHANGE_AREAS)
            if area:
                shown = f"'{path}'" if form == path else f"'{path}' (resolves to {form})"
                return f"path {shown} would read {area}"
        if self.resolve and os.path.isfile(forms[-1]) and file_holds_secret(forms[-1]):
            # an approved `cut -c 11-17` had printed a held chat token 7 characters a call: a reviewer
            # is not told what a file holds, and no change needs the daemon's own secrets printed
            shown = f"'{path}'" if forms[-1] == path else f"'{path}' (resolves to {forms[-1]})"
            return (f"path {shown} holds a secret Ongrid itself is configured with (a chat token, the model's "
                    "key or a bridge secret)")
        return None

    def read_problem(self, path: str, skip_names: frozenset[str] = frozenset(), *,
                     scan_secrets: bool = False, checked: bool = False) -> str | None:
        """Why reading the file ``path`` is refused, or None; a secret by name whose reason is in
        ``skip_names`` does not count (journalctl reads :data:`JOURNAL_NAMES`).  ``scan_secrets``
        (a command that prints what it reads): on the local host, a file that holds one of the
        daemon's own secrets (:func:`file_holds_secret`: a chat token, the model key, a bridge
        secret, as it is or in another letter case or encoding) is refused too, so no rewritten
        or piecemeal copy of it can reach the model; a file over
        :data:`~ongridd.secretset.FILE_SCAN_BYTES` is not checked (what it prints is redacted as
        every tool result is) — unless ``checked``: the command's output depends on what the file
        holds (it searches it, sorts it, or prints pieces of its lines: ``grep``, ``sed``,
        ``sort``, ``head -c``), so it could give a secret away a few characters or one yes/no at a
        time (``grep -c``, ``sed`` exit codes), each too little for the redaction; a file that
        could not be checked (over :data:`FILE_SCAN_BYTES`, unreadable, not a regular file) is
        then refused while the daemon holds any secret."""
        problem, forms = self.forms(path)
        if problem:
            return problem
        for form in forms:
            area = self._area_of(form, skip_names=skip_names)
            if area:
                shown = f"'{path}'" if form == path else f"'{path}' (resolves to {form})"
                return f"path {shown} would read {area}"
        if self.resolve:
            problem = _content_problem(path, forms[-1], skip_names)
            if problem is None and os.geteuid() == 0:  # as another user the kernel refuses such a read itself
                problem = _private_file_problem(path, forms[-1])
            if problem is None and scan_secrets:
                holds = file_holds_secret(forms[-1])
                shown = f"'{path}'" if forms[-1] == path else f"'{path}' (resolves to {forms[-1]})"
                if holds:
                    problem = (f"path {shown} holds a secret Ongrid itself is configured with (a chat token, the "
                               "model's key or a bridge secret), so it is not read; a copy of one there is worth "
                               "removing")
                elif holds is None and checked and holds_any_secret() and _unchecked(forms[-1]):
                    problem = _unchecked_problem(shown)
            return problem
        return None

    def pinned_problem(self, fd: int, word: str, *, checked: bool) -> str | None:
        """Why the local file open as ``fd`` (named ``word`` in a command) may not be read, or None:
        :meth:`read_problem` of where it is (its name as the kernel has it), and — of the open file
        itself, not of whatever a name leads to by now — the private-file check (as root) and the
        check for the daemon's own secrets (``checked``: as :meth:`read_problem`'s).  So a path
        swapped between two checks cannot have one file checked and another read."""
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
            info = os.fstat(fd)
        except OSError as exc:
            return f"path '{word}' cannot be looked at ({exc.strerror})"
        shown = f"'{word}'" if real == word else f"'{word}' (resolves to {real})"
        problem = self.read_problem(real)
        if problem is None and os.geteuid() == 0:
            problem = _private_file_problem(word, real, info=info)
        if problem is None:
            holds = file_holds_secret(f"/proc/self/fd/{fd}")
            if holds:
                problem = (f"path {shown} holds a secret Ongrid itself is configured with (a chat token, the "
                           "model's key or a bridge secret), so it is not read; a copy of one there is worth "
                           "removing")
            elif holds is None and checked and holds_any_secret():
                problem = _unchecked_problem(shown)
        return problem

    def certificate_problem(self, path: str) -> str | None:
        """Why ``openssl x509 -noout -in path`` is refused, or None: as :meth:`read_problem`, but
        the folders and names of TLS material (:data:`TLS_AREAS`, :data:`TLS_NAMES`) and private
        files are allowed — the command prints a certificate's fields and, given a key or any
        other file, ``Could not read certificate`` and none of it.  Judged by where ``path``
        leads too (``/etc/letsencrypt/live/*/cert.pem`` is a link into ``archive``)."""
        problem, forms = self.forms(path, always_resolve=True)
        if problem:
            return problem
        for form in forms:
            area = self._area_of(form, TLS_AREAS, TLS_NAMES)
            if area:
                shown = f"'{path}'" if form == path else f"'{path}' (resolves to {form})"
                return f"path {shown} would read {area}"
        return None

    def recursive_problem(self, path: str, *, checked: bool = False) -> str | None:
        """Why reading everything under ``path`` is refused, or None: it is
        itself forbidden, or it contains a forbidden area.  ``checked``: the command's
        output depends on what the files hold (``grep -r``), so a file under it that could
        not be checked for the daemon's secrets is refused too (see :meth:`read_problem`)."""
        problem = self.read_problem(path, scan_secrets=True, checked=checked)  # a file named to grep -r: as it is
        if problem:
            return problem
        if self.cwd is None and not path.startswith("/"):
            return (f"recursive read of relative path '{path}' on a remote host: it is under the ssh user's "
                    "home, which holds .ssh keys; name an absolute folder")
        _, forms = self.forms(path)
        for form in forms:
            inner = [*self.areas, *((k, "the host's ssh private keys (ssh_host_*_key)") for k in _KEY_FOLDERS)]
            for area, why in inner:
                if _under(area, form):
                    shown = f"'{path}'" if form == path else f"'{path}' (resolves to {form})"
                    return (f"recursive read of {shown} would include {area} — {why}; name the files to read "
                            f"instead (grep PATTERN {form.rstrip('/')}/FILE …)")
            storage = next((c for c in CONTAINER_STORAGE if (_under(form, c) or _under(c, form))
                            and not any(_under(form, v) for v in CONTAINER_VOLUMES)), None)
            if storage is None and any(r + "/" in form + "/" for r in _ROOTLESS_STORAGE):
                storage = "a user's container storage"
            if storage is not None:
                return (f"recursive read of '{path}' would include {storage}, where every container image's own "
                        "files lie (their password hashes, keys and credentials); name the file to read")
            if self.resolve:  # a copy of an area at the top of this folder or of one of its folders
                copy = self._copy_inside(form)
                if copy is not None:
                    return f"recursive read of '{path}' would include {copy}"
            home_like = form in ("/home", "/root") or (form.startswith("/home/") and form.count("/") == 2)
            if home_like:
                return f"recursive read of '{path}' would include a home folder's .ssh keys"
        if self.resolve and os.geteuid() == 0:  # root reads root's files as their owner: look at each
            problem = _private_file_inside(path, forms[-1])
            if problem:
                return problem
        if self.resolve:
            return _secret_file_inside(path, forms[-1], checked)
        return None

    def _copy_inside(self, folder: str) -> str | None:
        """A copy of an area that exists on this host inside ``folder`` (``/srv/chroot`` holding
        ``etc/kubernetes``; ``/srv/chroot/etc`` holding ``kubernetes``), or None."""
        for area, why in self.areas:
            if area.count("/") < 2:
                continue
            segments = area.strip("/").split("/")
            for k in range(len(segments)):  # the folder may stand for the area's first k segments
                if k and not folder.endswith("/" + "/".join(segments[:k])):
                    continue
                inside = posixpath.join(folder, *segments[k:])
                if inside != area and os.path.lexists(inside):
                    return f"{inside}, a copy of {area} ({why})"
        return None


#: the most entries a recursive read's folder is walked for private files (a root daemon only)
PRIVATE_WALK_MAX = 20_000


def _private_file_inside(path: str, real: str) -> str | None:
    """Why a recursive read of the local folder ``real`` (``path`` resolved) is refused when the
    daemon runs as root, or None: a private file lies under it (:func:`_private_file_problem`,
    as grep -r meets it: symbolic links not followed), or it holds more than
    :data:`PRIVATE_WALK_MAX` entries to look at.  A folder that cannot be read is skipped (the
    command reports its own error)."""
    if not os.path.isdir(real) or any(_under(real, folder) for folder in PRIVATE_FILES_READABLE_UNDER):
        return None
    from ongrid_host.runner import log_group_ids

    log_gids = log_group_ids()
    for entry in _files_under(real, skip=lambda folder: any(_under(folder, f) for f in PRIVATE_FILES_READABLE_UNDER)):
        if entry is None:
            return (f"recursive read of '{path}': more than {PRIVATE_WALK_MAX:,} entries to check for private "
                    "files (the daemon runs as root); name a smaller folder or the files to read")
        if _private_file_problem(entry.path, entry.path, log_gids):
            return (f"recursive read of '{path}' would include the private file '{entry.path}' (only its "
                    "owner, or owner and group, may read it; the daemon runs as root); name the files to read")
    return None


def _files_under(real: str, skip: Callable[[str], bool] = lambda folder: False) -> Iterator[os.DirEntry[str] | None]:
    """Every regular file under the folder ``real``, as grep -r meets them (symbolic links not
    followed), but in the folders ``skip`` says to leave out; then None, and nothing more, once
    more than :data:`PRIVATE_WALK_MAX` entries were seen.  A folder that cannot be read is
    skipped (the command reports its own error)."""
    seen = 0
    stack = [real]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > PRIVATE_WALK_MAX:
                yield None
                return
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not skip(entry.path):
                        stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    yield entry
            except OSError:
                continue


#: how many bytes of a recursive read's files are searched for the daemon's own secrets at most;
#: past that the rest is not checked (what the command prints is redacted as every tool result is)
SECRET_WALK_BYTES = 1 << 30


def _secret_file_inside(path: str, real: str, checked: bool = False) -> str | None:
    """Why a recursive read of the local folder ``real`` (``path`` resolved) is refused, or None:
    a file under it holds one of the daemon's own secrets (:func:`file_holds_secret`; symbolic
    links not followed, as grep -r meets them).  At most :data:`PRIVATE_WALK_MAX` entries and
    :data:`SECRET_WALK_BYTES` of files are looked at; a file over
    :data:`~ongridd.secretset.FILE_SCAN_BYTES`, or one that cannot be read, is skipped — unless
    ``checked`` (the command's output depends on what the files hold, as ``grep -r``'s does):
    then, while the daemon holds any secret, a file left unchecked, or a folder with more than
    the walk looks at, is refused (:func:`_unchecked_problem`)."""
    if not os.path.isdir(real):
        return None
    budget = SECRET_WALK_BYTES
    for entry in _files_under(real, skip=lambda folder: _grep_skips(os.path.basename(folder), folder=True)):
        if entry is not None and _grep_skips(entry.name, folder=False):
            continue  # grep -r is told to leave it out (grep_exclusions): it reads nothing of it
        if entry is None or budget <= 0:
            return _unchecked_problem(f"'{path}'", walk=True) if checked and holds_any_secret() else None
        try:
            size = entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
        holds = None  # a file larger than what is left to look at is skipped, the smaller ones after it not
        if size <= budget:
            budget -= size
            holds = file_holds_secret(entry.path)
        if holds:
            return (f"recursive read of '{path}' would include '{entry.path}', which holds a secret Ongrid itself "
                    "is configured with (a chat token, the model's key or a bridge secret); name the files to read")
        if holds is None and checked and holds_any_secret() and _unchecked(entry.path):
            return _unchecked_problem(f"'{entry.path}' (under '{path}')")
    return None


def _unchecked(real: str) -> bool:
    """Whether a read of ``real``, which the secret check could not read whole, would read what was
    not checked: not a folder (a recursive read's files are looked at one by one), and not a file
    this process may not read (the command, with no more rights than the daemon, cannot either)."""
    return os.path.lexists(real) and not os.path.isdir(real) and os.access(real, os.R_OK)


def _unchecked_problem(shown: str, *, walk: bool = False) -> str:
    """The refusal of a command whose output depends on what a file holds (a search, a sort,
    pieces of lines) for a file, or a folder's files, that could not be checked for the daemon's
    own secrets."""
    what = (f"the folder {shown} holds more than the {SECRET_WALK_BYTES >> 20} MiB or {PRIVATE_WALK_MAX:,} files "
            "that are checked for" if walk else
            f"path {shown} could not be checked for (over {FILE_SCAN_BYTES >> 20} MiB, unreadable, or not a "
            "regular file)")
    return (f"{what} the secrets Ongrid itself is configured with, and this command's output depends on what "
            f"it holds (it searches, sorts, or prints pieces of lines): a few characters or one yes/no at a time "
            f"(each under the {MIN_PIECE_CHARS} characters the redaction finds) it could give a held secret away; "
            "read the file by position instead (cat, head -n, tail -n), or name smaller files")


#: what a file begins with that says what it is, whatever its name: a journal file (a copy, a hard link,
#: ``system.journal.bak``) holds every field of every entry; an archive's members are files the path
#: checks never saw (``/etc/shadow`` packed by an approved backup)
_JOURNAL_MAGIC = b"LPKSHHRH"
_TAR_MAGIC_AT, _TAR_MAGIC = 257, b"ustar"
#: the other formats gzip's zcat unpacks (by their first two bytes): the checks read only gzip's own
_OTHER_COMPRESSED = {b"\x1f\x9e": "old gzip", b"\x1f\x9d": "compress .Z", b"\x1f\x1e": "pack .z",
                     b"\x1f\xa0": "SCO LZH"}
#: how much of a file (and of a gzip stream's start) is looked at
_SNIFF_BYTES = 520


def open_pinned(path: str) -> int:
    """``path`` opened to read — only when it is a regular file, a folder or a FIFO: it is first
    opened without reading (``O_PATH``), so a device (a disk, a terminal, a watchdog that starts
    when opened) or a socket is never opened to read, and then reopened as that very file.  Raises
    OSError (``ENXIO`` with ``strerror`` naming the kind, for a device or a socket)."""
    handle = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        mode = os.fstat(handle).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISFIFO(mode)):
            kind = ("a block device" if stat.S_ISBLK(mode) else "a character device" if stat.S_ISCHR(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "not a file")
            raise OSError(errno.ENXIO, kind, path)
        return os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    finally:
        os.close(handle)


def _content_problem(path: str, real: str, skip_names: frozenset[str] = frozenset()) -> str | None:
    """Why the local regular file ``real`` (``path`` resolved) is refused for what it begins with —
    plain or gzip-compressed (``zcat``, ``zgrep`` read through that) — or None: a journal file
    (unless its reason is in ``skip_names``: journalctl reads it), a tar or zip archive.  At most
    :data:`_SNIFF_BYTES` are read, and 64 KiB of a compressed file; a file that cannot be read is
    left to the command (it reports its own error)."""
    import zlib

    try:
        # never blocks, never opens a device to read: a FIFO is opened without waiting, and only a
        # regular file is read
        fd = open_pinned(real)
        with open(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            head = fh.read(_SNIFF_BYTES)
            if head[:2] == b"\x1f\x8b":  # gzip: what zcat would print
                fh.seek(0)
                try:
                    head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(fh.read(65536), _SNIFF_BYTES)
                except zlib.error:
                    return None
    except OSError:
        return None
    shown = f"'{path}'" if real == path else f"'{path}' (resolves to {real})"
    journal = SECRET_SUFFIXES[".journal"]
    if head.startswith(_JOURNAL_MAGIC) and journal not in skip_names:
        return f"path {shown} is {journal}"
    if head[:2] in _OTHER_COMPRESSED:
        return (f"path {shown} is compressed in a format ({_OTHER_COMPRESSED[head[:2]]}) whose contents the checks "
                "do not read, and zcat would print them; unpack it with a reviewed command")
    if head[_TAR_MAGIC_AT:_TAR_MAGIC_AT + len(_TAR_MAGIC)] == _TAR_MAGIC or head.startswith(b"PK\x03\x04"):
        return (f"path {shown} is an archive: the files packed in it were never checked (a backup may hold "
                "keys or password files); list or unpack it with a reviewed command")
    return None


def _private_file_problem(path: str, real: str, log_gids: set[int] | None = None,
                          info: os.stat_result | None = None) -> str | None:
    """Why the local file ``real`` (``path`` resolved) is refused as private, or None: a regular
    file others may not read — and its group neither, unless that group is one the reads keep for
    logs and the journal (``adm``, ``systemd-journal``): what the unit's unprivileged user could not
    read either — outside :data:`PRIVATE_FILES_READABLE_UNDER` and the safe kernel files.  Asked only when the daemon runs as root: its commands read a file
    of root's as its owner, which no permission check stops (run as another user, they read
    without the daemon's capabilities and the kernel refuses such a file itself).  Such a mode is
    how keys and password files are kept, whatever their names.  It covers the paths a command
    names, not the files a recursive read comes across.  A file that cannot be looked at is left
    to the command (it reports its own error)."""
    if safe_kernel_file(real) or any(_under(real, folder) for folder in PRIVATE_FILES_READABLE_UNDER):
        return None  # /proc/<pid>/io is 0400 and one of the safe kernel files
    if info is None:  # (``info``: the open file's own, where the caller holds it open)
        try:
            info = os.stat(real)
        except OSError:
            return None
    if log_gids is None:
        from ongrid_host.runner import log_group_ids

        log_gids = log_group_ids()
    if (not stat.S_ISREG(info.st_mode) or info.st_mode & 0o004
            or (info.st_mode & 0o040 and info.st_gid in log_gids)):
        return None
    shown = f"'{path}'" if real == path else f"'{path}' (resolves to {real})"
    who = "its owner" if not info.st_mode & 0o040 else "its owner and group"
    return (f"path {shown} is a private file (mode {stat.S_IMODE(info.st_mode):04o}: only {who} may read it, "
            "as keys and password files are kept); ask an operator to read it, or read a file others may read")


#: the tags of a POSIX access ACL's entries (``system.posix_acl_access``: a 4-byte version 2, then
#: entries of tag u16, permissions u16, id u32, little-endian)
_ACL_USER_OBJ, _ACL_USER, _ACL_GROUP_OBJ, _ACL_GROUP, _ACL_MASK, _ACL_OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20


def may_search(folder: str, info: os.stat_result, uid: int, groups: set[int]) -> bool:
    """Whether a process of ``uid`` and ``groups``, without the capabilities that bypass file
    permissions, may pass through ``folder`` (search permission), as the kernel decides it: by
    its POSIX access ACL when it has one (a named user's or group's entry, limited by the mask),
    else by its mode.  An ACL that cannot be read or understood counts as no permission."""
    try:
        acl = os.getxattr(folder, "system.posix_acl_access")
    except OSError as exc:
        if exc.errno not in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            return False
        acl = b""
    if not acl:
        bits = 0o100 if info.st_uid == uid else 0o010 if info.st_gid in groups else 0o001
        return bool(info.st_mode & bits)
    if len(acl) < 4 or (len(acl) - 4) % 8 or int.from_bytes(acl[:4], "little") != 2:
        return False
    entries = [(int.from_bytes(acl[i:i + 2], "little"), int.from_bytes(acl[i + 2:i + 4], "little"),
                int.from_bytes(acl[i + 4:i + 8], "little")) for i in range(4, len(acl), 8)]
    mask = next((perm for tag, perm, _ in entries if tag == _ACL_MASK), 0o7)
    if info.st_uid == uid:
        return bool(info.st_mode & 0o100)  # the owner's entry is the mode's owner bits
    named = [perm for tag, perm, who in entries if tag == _ACL_USER and who == uid]
    if named:
        return bool(named[0] & mask & 1)
    matched = [perm for tag, perm, who in entries
               if (tag == _ACL_GROUP_OBJ and info.st_gid in groups) or (tag == _ACL_GROUP and who in groups)]
    if matched:
        return any(perm & mask & 1 for perm in matched)
    return any(tag == _ACL_OTHER and perm & 1 for tag, perm, _ in entries)


def closed_folder_problem(word: str, real: str) -> str | None:
    """Why the local file or folder at ``real`` (``word`` resolved, as the kernel has an open one)
    may not be read, or None: a folder above it that a read — run as the daemon's user and groups
    without the capabilities that bypass file permissions (see
    :func:`ongrid_host.runner.reduced_privileges_prefix`) — may not enter.  A read is handed the
    open file (``/dev/fd/N``), past the folders a path walk would have had checked: so they are
    checked here (:func:`may_search`: its ACL or its mode).  None when reads keep the daemon's
    privileges (nothing dropped) and for a folder that cannot be looked at (the command reports its
    own error)."""
    from ongrid_host.runner import log_group_ids, reduced_privileges_prefix

    if not reduced_privileges_prefix():
        return None
    uid = os.geteuid()
    groups = {os.getegid(), *os.getgroups(), *(log_group_ids() if uid == 0 else ())}
    folders = []
    folder = os.path.dirname(real)
    while folder not in folders:
        folders.append(folder)
        folder = os.path.dirname(folder)
    for folder in reversed(folders):
        try:
            info = os.stat(folder)
        except OSError:
            return None
        if not may_search(folder, info, uid, groups):
            shown = f"'{word}'" if real == word else f"'{word}' (resolves to {real})"
            return (f"path {shown} lies in {folder} (mode {stat.S_IMODE(info.st_mode):04o}), which the daemon's "
                    "reads may not enter: they run as its user and groups without the capabilities that bypass "
                    "file permissions; ask an operator to read it")
    return None


def grep_exclusions() -> tuple[str, ...]:
    """Options that keep a recursive ``grep`` out of every secret-named
    file and folder it meets on the way (``--exclude-dir=.aws``,
    ``--exclude=*.key`` …): the recursion check can only see the folders
    named on the command line, not what lies under them.  They match a
    name in any case, like the policy, and go after every option the
    command wrote: of contradictory ``--include`` and ``--exclude`` options
    grep applies the last that matches."""
    words = []
    for name in SECRET_NAMES:
        words += [f"--exclude-dir={_any_case(name)}", f"--exclude={_any_case(name)}"]
    words += [f"--exclude=*{_any_case(suffix)}" for suffix in SECRET_SUFFIXES]
    words += [f"--exclude={dot}{_any_case(prefix)}*" for prefix in SECRET_PREFIXES for dot in ("", ".")]
    words += [f"--exclude=*{_any_case(infix)}*" for infix in SECRET_INFIXES]
    words += [f"--exclude={_any_case(base)}" for _, base in SECRET_NAMES_IN]
    words += [f"--exclude=*{_any_case('environ')}*"]
    return tuple(dict.fromkeys(words))


def _grep_skips(name: str, *, folder: bool) -> bool:
    """Whether the ``--exclude-dir`` (``folder``) or ``--exclude`` globs of :func:`grep_exclusions`
    leave a file or folder of that name out of a recursive grep, matched as grep matches them."""
    import fnmatch

    prefix = "--exclude-dir=" if folder else "--exclude="
    return any(fnmatch.fnmatchcase(name, word[len(prefix):]) for word in _exclusion_words() if word.startswith(prefix))


@functools.cache
def _exclusion_words() -> tuple[str, ...]:
    return grep_exclusions()


def _any_case(name: str) -> str:
    """A glob matching ``name`` in any case (grep's globs are case-sensitive, the policy is not):
    ``.ssh`` → ``.[sS][sS][hH]``."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in name)
