"""How a script runs on a host: the SSH connection, sudo, parameters, secrets and re-run rules.

Every host step in this program goes through `host_script`, so the rules live in one place:
- the script is a static file in the `scripts/` folder of the component that sends it (found by its name,
  unique across components), after the shared helpers of this folder (`lib.sh`; code several scripts
  share in `include/`); it reaches the host once per version in a content-addressed bundle (`delivery.py`:
  the host's `<host>-scripts` step), and the step's command is a short call that runs it by its SHA-256
  as `bash -c '<script>' <name>`, exactly the program it used to carry inline;
- parameters are `VAR=value` assignments in front of it, each quoted with `shlex.quote`
  (sshd's `AcceptEnv` usually refuses `environment=`);
- secrets go on stdin, never on the command line, and commands whose output holds secrets do not log
  and mark stdout/stderr secret;
- a step re-runs exactly when its script or parameters change, never otherwise: `triggers` hold a
  hash of them (of the command that carried the script inline, `inline_invocation`: the value every
  deployed step holds, so that the delivery itself replaces nothing). There is no `update` command:
  pulumi-command runs `create` on update when `update` is unset (provider/pkg/provider/remote/
  commandController.go, `Update`). A step with a destructive `delete` (uninstall, drain) must not be torn down because
  its script changed: its triggers hold only its identity (host, address), a changed script is an
  in-place update that runs the idempotent script again, and a changed identity replaces it with the
  old one torn down first (`delete_before_replace`).
"""

from __future__ import annotations

import functools
import hashlib
import re
import shlex
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pulumi
import pulumi_command as command

from components.hosts import delivery
from settings import Settings

HERE = Path(__file__).parent
COMPONENTS = HERE.parent
LIB = HERE / "lib.sh"
INCLUDES = HERE / "include"
_INCLUDE = re.compile(r"^# include (\S+)\n", re.M)

# A single argv string is limited to 128 KiB on Linux (MAX_ARG_STRLEN); stay well below it.
_MAX_COMMAND_BYTES = 100_000


@dataclass(frozen=True)
class HostAccess:
    """How to reach one host over SSH."""

    name: str
    address: str
    connection: command.remote.ConnectionArgs
    sudo: bool
    scripts: Optional[pulumi.Resource] = None
    """The host's `<host>-scripts` step (the bundle of host scripts): every step on the host waits for it."""


def host_accesses(
    settings: Settings, private_key: pulumi.Input[str], copies_to: Optional[Container[str]] = None
) -> dict[str, HostAccess]:
    """One SSH access per cluster node and NAS host, keyed by host name, each with the step that copies the
    host scripts there (`delivery.copy_step`), which every host step on it waits for. `copies_to`: the hosts this
    stack copies them to (a layered stack: those it runs steps on; the others' stacks copy theirs); None: all."""
    ssh = settings.ssh
    proxy = None
    if ssh.bastion is not None:
        proxy = command.remote.ProxyConnectionArgs(
            host=ssh.bastion.host,
            port=ssh.bastion.port,
            user=ssh.bastion.user,
            private_key=private_key,
            host_key=ssh.bastion.host_key,
            dial_error_limit=ssh.dial_error_limit,
            per_dial_timeout=ssh.per_dial_timeout_seconds,
        )
    hosts = [(n.name, n.address, n.host_key) for n in settings.nodes]
    hosts += [(h.name, h.address, h.host_key) for h in settings.nas.hosts]
    accesses = {}
    for name, address, host_key in hosts:
        connection = command.remote.ConnectionArgs(
            host=address,
            port=ssh.port,
            user=ssh.user,
            private_key=private_key,
            host_key=host_key,
            proxy=proxy,
            dial_error_limit=ssh.dial_error_limit,
            per_dial_timeout=ssh.per_dial_timeout_seconds,
        )
        scripts = delivery.copy_step(name, connection) if copies_to is None or name in copies_to else None
        accesses[name] = HostAccess(name, address, connection, sudo=ssh.user != "root", scripts=scripts)
    return accesses


def script_files() -> list[Path]:
    """Every host script, each in the `scripts/` folder of the component that sends it."""
    return sorted(COMPONENTS.glob("*/scripts/*.sh"))


@functools.cache
def script_path(script: str) -> Path:
    """`components/<component>/scripts/<script>`: a host script lives next to the component that sends it."""
    found = [path for path in script_files() if path.name == script]
    if len(found) != 1:
        raise FileNotFoundError(f"host script {script!r}: expected one components/*/scripts/{script}, found {found}")
    return found[0]


@functools.cache
def script_text(script: str) -> str:
    """The program that runs on the host: the shared helpers (`lib.sh`), then the script.

    Read once per process: every node's steps send the same files (1000 nodes: ~6000 reads otherwise)."""
    return LIB.read_text() + "\n" + expanded(script)


def expanded(script: str) -> str:
    """The host script `script` with each `# include NAME` line replaced by the file
    `components/hosts/include/NAME` (code that several scripts share, without making it part of every
    script, as `lib.sh` is), or else by the host script NAME of a component (a program that a step installs
    on the host as a file of its own); not expanded further."""

    def include(match: re.Match[str]) -> str:
        path = INCLUDES / match.group(1)
        if path.is_file():
            return path.read_text()
        try:
            return script_path(match.group(1)).read_text()
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{script}: `# include {match.group(1)}`: no such file in {INCLUDES} nor a host script of that name"
            ) from None

    return _INCLUDE.sub(include, script_path(script).read_text())


@functools.cache
def _quoted_program(script: str) -> str:
    return shlex.quote(script_text(script))


@functools.cache
def program_digest(script: str) -> str:
    """The SHA-256 of the program `script` runs (`script_text`): its name in the bundle and on the host."""
    return delivery.digest(script_text(script))


def invocation(script: str, params: Mapping[str, str], sudo: bool) -> str:
    """The shell command that runs the host script `script` with `params` as variables: the runner
    (`delivery.RUNNER`), which runs the program by its SHA-256 from the host's copy of the bundle."""
    return _command(shlex.quote(delivery.runner(program_digest(script))), script, params, sudo)


def program_of(command_text: str) -> str:
    """The program a step's command runs (the host script it names by SHA-256, `lib.sh` first), for
    reviews and tests that read what a step does."""
    found = re.search(r"\bh=([0-9a-f]{64})\n", command_text)
    programs = {program_digest(path.name): script_text(path.name) for path in script_files()}
    if found is None or found.group(1) not in programs:
        raise ValueError(f"not a host step's command, or its program is not a host script: {command_text[:80]!r}")
    return programs[found.group(1)]


def inline_invocation(script: str, params: Mapping[str, str], sudo: bool) -> str:
    """The command as it was when it carried the program inline (`bash -c '<program>' <name>`): what a
    step's trigger hashes, so that it keeps the value deployed stacks hold. Never sent."""
    return _command(_quoted_program(script), script, params, sudo)


def _command(body_text: str, script: str, params: Mapping[str, str], sudo: bool) -> str:
    assignments = " ".join(f"{key}={shlex.quote(str(value))}" for key, value in sorted(params.items()))
    body = f"bash -c {body_text} {shlex.quote(script)}"
    if sudo:
        cmd = f"sudo -n env {assignments} {body}" if assignments else f"sudo -n {body}"
    else:
        cmd = f"{assignments} {body}" if assignments else body
    if len(cmd.encode()) > _MAX_COMMAND_BYTES:
        raise ValueError(f"command for {script} is {len(cmd)} bytes; keep scripts and parameters under 100 kB")
    return cmd


def fingerprint(*parts: object) -> str:
    """A short stable hash of the parts (script texts, parameters), for triggers and labels."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def host_script(
    resource_name: str,
    host: HostAccess,
    script: Optional[str],
    params: Optional[Mapping[str, str]] = None,
    *,
    stdin: Optional[pulumi.Input[str]] = None,
    delete_script: Optional[str] = None,
    delete_params: Optional[Mapping[str, str]] = None,
    identity: Sequence[str] = (),
    replaced_with: Optional[command.remote.Command] = None,
    trigger_parts: Optional[Sequence[str]] = None,
    secret_output: bool = False,
    opts: Optional[pulumi.ResourceOptions] = None,
) -> command.remote.Command:
    """A `remote.Command` that runs `script` on `host`.

    `script` None: nothing runs at create or update (pulumi-command opens no connection then: its
    remote Command returns at once when `create` and `update` are unset), only `delete_script` at delete.

    `identity`: values that, when they change, make this a different step (replace, not update).
    `delete_script`: runs when the step is removed from the program (or replaced); it is the only
    place destructive work may happen, and it runs before a replacement's create.
    `stdin`: secret material for the script; it reads it from standard input.
    `replaced_with`: a step on which this one stands (e.g. a Node's membership on its RKE2 install).
    The triggers depend on that step's id, so when it is replaced the engine replaces this step
    too, deleting it first (pulumi/pulumi#2167: a delete-before-replace deletes exactly the
    dependents whose replace-on-change inputs depend on it; `depends_on` alone does not). The
    value stays the same hash, so adding the dependency to a deployed stack replaces nothing.
    `trigger_parts`: what a destructive step's trigger hashes instead of (script, delete script,
    identity), so that a step whose scripts were reorganised keeps the trigger it was deployed with.
    """
    params = dict(params or {})
    create = invocation(script, params, host.sudo) if script else None
    delete = invocation(delete_script, dict(delete_params or {}), host.sudo) if delete_script else None
    options = pulumi.ResourceOptions(
        delete_before_replace=delete is not None,
        additional_secret_outputs=["stdout", "stderr"] if secret_output else None,
        depends_on=[host.scripts] if host.scripts is not None else None,
    )
    parts = trigger_parts if trigger_parts is not None else (script, delete_script, *identity)
    inline = inline_invocation(script, params, host.sudo) if script else None
    trigger: pulumi.Input[str] = fingerprint(*parts) if delete else fingerprint(inline)
    if replaced_with is not None:
        trigger = replaced_with.id.apply(lambda _, value=trigger: value)
    return command.remote.Command(
        resource_name,
        connection=host.connection,
        create=create,
        delete=delete,
        stdin=stdin,
        # Non-destructive steps: re-run (replace) when the script or its parameters change.
        # Destructive steps: replace only when their identity changes; other changes update in place.
        triggers=[trigger],
        logging=command.remote.Logging.NONE if secret_output else None,
        add_previous_output_in_env=False,
        opts=pulumi.ResourceOptions.merge(options, opts),
    )
