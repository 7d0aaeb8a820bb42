"""`hetpool users …`, `hetpool tokens …` and `hetpool whoami`: who may do what, and their tokens."""

from __future__ import annotations

import typer

from hetpool.cli.render import OutputFormat, console, emit_data, err_console, table
from hetpool.core.errors import SpecError
from hetpool.governance.access import ROLES, parse_binding, validate_binding

users_app = typer.Typer(no_args_is_help=True, help="Users and their role bindings (role on a tenant subtree).")
tokens_app = typer.Typer(no_args_is_help=True, help="API tokens: create (shown once), list, revoke.")

ROLE_HELP = f"one of {', '.join(ROLES)}"


def collect_bindings(role: str | None, tenant: str | None, binds: list[str] | None) -> list[dict]:
    """--role/--tenant and repeatable --bind role=tenant → checked {role, tenant} dicts
    (checked here too so a typo is named before anything is sent)."""
    out = []
    try:
        if role is not None:
            try:
                out.append(validate_binding(role, tenant).to_dict())
            except ValueError as exc:
                raise ValueError(f"--{exc}") from None  # "role: …" / "tenant: …" name the options here
        elif tenant is not None:
            raise ValueError(f"--role: give the role to grant on {tenant!r} ({ROLE_HELP})")
        for text in binds or []:
            try:
                out.append(parse_binding(text).to_dict())
            except ValueError as exc:
                raise ValueError(f"--bind {text!r}: {exc}") from None
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    return out


def _bindings_text(user: dict) -> str:
    return ", ".join(f"{b.role}@{b.tenant}" if b.tenant else b.role for b in user.bindings) or "-"


def register(app: typer.Typer) -> None:
    from hetpool.cli.main import OutOpt, TokenOpt, UrlOpt, _client, handles_errors

    kit = (UrlOpt, TokenOpt, OutOpt, _client, handles_errors)
    _register_users(kit)
    _register_tokens(kit)
    _register_whoami(app, kit)
    app.add_typer(users_app, name="users")
    app.add_typer(tokens_app, name="tokens")


def _register_users(kit: tuple) -> None:
    """users create | list | get | bind | unbind | delete."""
    UrlOpt, TokenOpt, OutOpt, _client, handles_errors = kit
    RoleOpt = typer.Option(None, "--role", help=ROLE_HELP)
    TenantOpt = typer.Option(None, "--tenant", help="tenant subtree for --role (leave out for platform-admin, auditor, agent)")
    BindOpt = typer.Option(None, "--bind", help="role=tenant (or a global role alone); repeatable")

    def _print_user(user: dict, output: OutputFormat) -> None:
        if not emit_data(user, output):
            console.print(f"user/{user.name}: {_bindings_text(user)}")

    @users_app.command("create")
    @handles_errors
    def create(
        name: str = typer.Argument(..., help="user name (as the OIDC username claim, if OIDC is used)"),
        role: str = RoleOpt,
        tenant: str = TenantOpt,
        bind: list[str] = BindOpt,
        url: str = UrlOpt,
        token: str = TokenOpt,
        output: OutputFormat = OutOpt,
    ) -> None:
        """Create a user with role bindings, e.g. --role member --tenant ai-lab/nlp."""
        bindings = collect_bindings(role, tenant, bind)
        with _client(url, token) as client:
            _print_user(client.create_user(name, bindings), output)

    @users_app.command("list")
    @handles_errors
    def list_users(url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutOpt) -> None:
        """Users you administer."""
        with _client(url, token) as client:
            users = client.list_users()
        if not emit_data(users, output):
            table(["NAME", "ROLE", "BINDINGS", "CREATED"], [[u["name"], u["role"] or "-", _bindings_text(u), u["created_at"]] for u in users])

    @users_app.command("get")
    @handles_errors
    def get(name: str, url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutOpt) -> None:
        """One user and its bindings."""
        with _client(url, token) as client:
            _print_user(client.get_user(name), output)

    @users_app.command("bind")
    @handles_errors
    def bind_cmd(
        name: str,
        role: str = RoleOpt,
        tenant: str = TenantOpt,
        bind: list[str] = BindOpt,
        url: str = UrlOpt,
        token: str = TokenOpt,
        output: OutputFormat = OutOpt,
    ) -> None:
        """Grant roles: --role member --tenant ai-lab/nlp, or --bind role=tenant (repeatable)."""
        bindings = collect_bindings(role, tenant, bind)
        if not bindings:
            raise SpecError(f"--role: give a role to grant ({ROLE_HELP}), with --tenant for scoped roles")
        with _client(url, token) as client:
            _print_user(client.add_bindings(name, bindings), output)

    @users_app.command("unbind")
    @handles_errors
    def unbind_cmd(
        name: str,
        role: str = RoleOpt,
        tenant: str = TenantOpt,
        bind: list[str] = BindOpt,
        url: str = UrlOpt,
        token: str = TokenOpt,
        output: OutputFormat = OutOpt,
    ) -> None:
        """Remove roles (the same forms as bind)."""
        bindings = collect_bindings(role, tenant, bind)
        if not bindings:
            raise SpecError(f"--role: give the role to remove ({ROLE_HELP})")
        with _client(url, token) as client:
            for b in bindings:
                user = client.remove_binding(name, b["role"], b["tenant"])
        _print_user(user, output)

    @users_app.command("delete")
    @handles_errors
    def delete(name: str, url: str = UrlOpt, token: str = TokenOpt) -> None:
        """Delete a user; its tokens stop working at once."""
        with _client(url, token) as client:
            client.delete_user(name)
        console.print(f"user/{name} deleted")


def _register_tokens(kit: tuple) -> None:
    """tokens create | list | revoke."""
    UrlOpt, TokenOpt, OutOpt, _client, handles_errors = kit

    @tokens_app.command("create")
    @handles_errors
    def token_create(
        user: str = typer.Option(None, "--user", help="for another user you administer (default: yourself)"),
        label: str = typer.Option("", "--label", help="what it is for (laptop, ci …)"),
        expires: str = typer.Option(None, "--expires", help="lifetime such as 30d or 12h, or 'never' (default 90d)"),
        url: str = UrlOpt,
        token: str = TokenOpt,
        output: OutputFormat = OutOpt,
    ) -> None:
        """Create a token; it is printed once (only its hash is stored)."""
        with _client(url, token) as client:
            created = client.create_token(user, label, expires)
        if emit_data(created, output):
            return
        print(created.token)  # alone on stdout, for scripts
        err_console.print(f"token {created.id} for {created.user}, expires {created.expires_at or 'never'}; shown once, keep it safe")

    @tokens_app.command("list")
    @handles_errors
    def token_list(
        user: str = typer.Option(None, "--user", help="another user you administer"),
        url: str = UrlOpt,
        token: str = TokenOpt,
        output: OutputFormat = OutOpt,
    ) -> None:
        """Tokens (never their secrets): state, expiry, last use."""
        with _client(url, token) as client:
            tokens = client.list_tokens(user)
        if not emit_data(tokens, output):
            rows = [[t.id, t.user, t.label, t.state, t.created_at, t.expires_at or "never", t.last_used_at or "-"] for t in tokens]
            table(["ID", "USER", "LABEL", "STATE", "CREATED", "EXPIRES", "LAST USED"], rows)

    @tokens_app.command("revoke")
    @handles_errors
    def token_revoke(token_id: int, url: str = UrlOpt, token: str = TokenOpt) -> None:
        """Revoke a token (yours, or of a user you administer)."""
        with _client(url, token) as client:
            revoked = client.revoke_token(token_id)
        console.print(f"token {revoked.id} of {revoked.user} revoked")


def _register_whoami(app: typer.Typer, kit: tuple) -> None:
    UrlOpt, TokenOpt, OutOpt, _client, handles_errors = kit

    @app.command()
    @handles_errors
    def whoami(url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutOpt) -> None:
        """Who the token belongs to, its bindings and where each action is allowed."""
        with _client(url, token) as client:
            me = client.whoami()
        if emit_data(me, output):
            return
        console.print(f"{me.name} ({me.role or 'no role'}, via {me.via}): {_bindings_text(me)}")
        for action, scopes in me.actions.items():
            console.print(f"  {action}: {'everywhere' if scopes == '*' else ', '.join(scopes)}")
