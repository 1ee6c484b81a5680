"""The guard in front of every servicer: the caller's role and the request's bounds.

A ``RequestGuard`` is a gRPC server interceptor that each daemon installs with its table of
methods. Before a servicer sees a request it checks, in order:

1. with mutual TLS on, the caller's role: roles are URIs ``hanamenode-role:<role>`` among
   the subject alternative names of the caller's certificate (one certificate may carry
   several). A method needs one of the roles its rule names; a caller without it gets
   PERMISSION_DENIED naming the role needed and the ones presented. A method missing from
   the table is refused to everybody (fail closed);
2. that the request decodes at all (bytes that are no message of the method's type are
   INVALID_ARGUMENT, not gRPC's INTERNAL with a traceback in the daemon's log);
3. the bounds of every field (``proto.bounds``): a field out of bounds is INVALID_ARGUMENT
   naming the field, before the servicer acts;
4. that every enum field holds a value its enum defines: proto3 enums are open, so a number
   no member has decodes fine and would reach a servicer that compares it with the members
   it knows (an unknown ``RequestSource`` skipped the manual-control check, issue 25 item
   5). It is INVALID_ARGUMENT naming the field and the value.

A method whose roles depend on the request (``MethodRule.roles_for``) cannot tell them from
bytes that do not decode: those are INVALID_ARGUMENT before the role check (they carry
nothing the servicer could act on), never an exception in the interceptor.

Refusals carry the service's own error classes (``invalid`` and ``denied``), so a client
re-raises them as it does the servicer's own refusals. Messages of a client stream (the
journal stream, an image upload) are checked one by one as the servicer reads them; a bad one
raises the ``invalid`` class inside the servicer, which answers it like its own errors::

    guard = RequestGuard(RULES, check_roles=settings.tls.enabled,
                         invalid=InvalidRequestError, denied=AccessDeniedError,
                         to_status=to_status)
    server = make_server(settings, interceptors=[guard])
"""

from __future__ import annotations

import enum
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from cryptography import x509
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from proto import bounds

__all__ = [
    "ANY_ROLE",
    "ROLE_URI_PREFIX",
    "AioRequestGuard",
    "MethodRule",
    "RequestGuard",
    "Role",
    "roles_of_certificate",
    "unknown_enum_value",
]

ROLE_URI_PREFIX = "hanamenode-role:"


class Role(enum.StrEnum):
    """What a certificate may be allowed to do (docs/operations.md §9)."""

    NAMENODE = "namenode"
    JOURNALNODE = "journalnode"
    ADMIN = "admin"
    CLIENT = "client"


ANY_ROLE = frozenset(Role)

Status = tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True, slots=True)
class _Undecodable:
    """What the guard's deserializer returns for bytes that are not a request message."""

    reason: str


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:  # DecodeError, and whatever a broken message raises
            return _Undecodable(f"{type(exc).__name__}: {exc}")

    return deserialize


@dataclass(frozen=True, slots=True)
class MethodRule:
    """Who may call one method: ``roles``, or ``roles_for(request)`` when it depends on the
    request (an HA transition asked by the elector or by an operator)."""

    roles: frozenset[Role] = frozenset()
    roles_for: Callable[[Any], frozenset[Role]] | None = None
    per_message: bool = False
    """A stream whose messages each carry a call of their own (the NameNode's Session): the
    guard checks the caller's role when the stream opens and refuses undecodable bytes, and
    the servicer checks each message's call with ``refusal`` and answers a refused one alone,
    so that one bad call does not end the stream."""

    def needed(self, request: Any) -> frozenset[Role]:
        if self.roles_for is not None and request is not None:
            return self.roles_for(request)
        return self.roles


@functools.lru_cache(maxsize=256)
def roles_of_certificate(pem: bytes) -> frozenset[str]:
    """The role names in a PEM certificate's ``hanamenode-role:`` SAN URIs (any text after
    the prefix, so that an unknown role is reported as presented, not dropped)."""
    cert = x509.load_pem_x509_certificate(pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return frozenset()
    uris = san.get_values_for_type(x509.UniformResourceIdentifier)
    return frozenset(u[len(ROLE_URI_PREFIX) :] for u in uris if u.startswith(ROLE_URI_PREFIX))


def _presented(context: grpc.ServicerContext) -> frozenset[str]:
    auth: Mapping[str, Any] = context.auth_context() or {}
    pems = auth.get("x509_pem_cert") or []
    return roles_of_certificate(bytes(pems[0])) if pems else frozenset()


def unknown_enum_value(request: Message, _prefix: str = "") -> str | None:
    """Why ``request`` (nested messages included) is refused for an enum field holding a
    number its enum has no member for, or None when every enum value is known."""
    for field, value in request.ListFields():
        path = _prefix + field.name
        repeated = bool(field.is_repeated)
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            for item in value if repeated else (value,):
                found = unknown_enum_value(item, path + ".")
                if found is not None:
                    return found
        elif field.type == FieldDescriptor.TYPE_ENUM:
            enum_type = field.enum_type
            assert enum_type is not None  # an enum field always has its enum
            for item in value if repeated else (value,):
                if item not in enum_type.values_by_number:
                    names = ", ".join(f"{v.name}={v.number}" for v in enum_type.values)
                    return (
                        f"request field {path} is {item}, not a value of "
                        f"{enum_type.name} ({names})"
                    )
    return None


def _names(roles: frozenset[Role] | frozenset[str]) -> str:
    return " or ".join(sorted(str(r) for r in roles)) or "none"


class RequestGuard(grpc.ServerInterceptor):
    """Checks role and bounds before every method in ``rules`` (keyed ``/pkg.Service/Method``)."""

    def __init__(
        self,
        rules: Mapping[str, MethodRule],
        *,
        check_roles: bool,
        invalid: Callable[[str], Exception],
        denied: Callable[[str], Exception],
        to_status: Callable[[Any], Status],
    ) -> None:
        self._rules = dict(rules)
        self.check_roles = check_roles
        self._invalid = invalid
        self._denied = denied
        self._to_status = to_status

    # -- the decisions -------------------------------------------------------------------------

    def refusal(
        self, method: str, request: Message | _Undecodable | None, presented: frozenset[str] | None
    ) -> Exception | None:
        """Why a call of ``method`` (full name) with ``request`` (None: not read yet) by a
        caller presenting ``presented`` roles (None: roles not checked) is refused, or None."""
        name = method.rsplit("/", 1)[-1]
        if presented is not None:
            rule = self._rules.get(method)
            if rule is None:
                return self._denied(f"{name}: no role may call this method")
            if isinstance(request, _Undecodable) and rule.roles_for is not None:
                # The roles needed depend on fields these bytes do not have.
                return self._invalid(
                    f"{name}: the request is not a valid message ({request.reason})"
                )
            needed = rule.needed(request)
            if not needed & presented:
                return self._denied(
                    f"{name} needs the role {_names(needed)}; the caller's certificate "
                    f"presents {_names(presented)}"
                )
        if isinstance(request, _Undecodable):
            return self._invalid(f"{name}: the request is not a valid message ({request.reason})")
        if request is not None:
            violation = bounds.check(request)
            if violation is not None:
                return self._invalid(f"{name}: {violation.message}")
            unknown = unknown_enum_value(request)
            if unknown is not None:
                return self._invalid(f"{name}: {unknown}")
        return None

    # -- the interceptor -----------------------------------------------------------------------

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method: str = handler_call_details.method
        if handler.request_streaming:
            return self._wrap_streaming(method, handler)
        return self._wrap_unary(method, handler)

    def _abort(self, context: grpc.ServicerContext, exc: Exception) -> None:
        code, details, trailers = self._to_status(exc)
        context.set_trailing_metadata(trailers)
        context.abort(code, details)

    def _presented(self, context: grpc.ServicerContext) -> frozenset[str] | None:
        return _presented(context) if self.check_roles else None

    def caller_roles(self, context: Any) -> frozenset[str] | None:
        """The roles the caller's certificate presents, None when roles are not checked: what
        ``refusal`` takes (a ``per_message`` servicer reads them once per stream)."""
        return self._presented(context)

    def _wrap_unary(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        streaming = handler.response_streaming
        behavior = handler.unary_stream if streaming else handler.unary_unary
        assert behavior is not None
        make = grpc.unary_stream_rpc_method_handler if streaming else (
            grpc.unary_unary_rpc_method_handler
        )

        def guarded(request: Any, context: grpc.ServicerContext) -> Any:
            refused = self.refusal(method, request, self._presented(context))
            if refused is not None:
                self._abort(context, refused)
            return behavior(request, context)

        return make(
            guarded,
            request_deserializer=_tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )

    def _wrap_streaming(
        self, method: str, handler: grpc.RpcMethodHandler
    ) -> grpc.RpcMethodHandler:
        streaming = handler.response_streaming
        behavior = handler.stream_stream if streaming else handler.stream_unary
        assert behavior is not None
        make = grpc.stream_stream_rpc_method_handler if streaming else (
            grpc.stream_unary_rpc_method_handler
        )

        def checked(requests: Iterator[Any]) -> Iterator[Any]:
            for request in requests:
                refused = self.refusal(method, request, None)
                if refused is not None:
                    raise refused
                yield request

        def guarded(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
            refused = self.refusal(method, None, self._presented(context))
            if refused is not None:
                self._abort(context, refused)
            return behavior(checked(requests), context)

        return make(
            guarded,
            request_deserializer=_tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )


class AioRequestGuard(RequestGuard, grpc.aio.ServerInterceptor):
    """``RequestGuard`` for a grpc.aio server: the same decisions (``refusal``), wrapped
    around coroutine handlers."""

    async def intercept_service(  # type: ignore[override]
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method: str = handler_call_details.method
        if handler.request_streaming:
            return self._wrap_aio_streaming(method, handler)
        return self._wrap_aio_unary(method, handler)

    async def _abort_aio(self, context: Any, exc: Exception) -> None:
        code, details, trailers = self._to_status(exc)
        context.set_trailing_metadata(trailers)
        await context.abort(code, details)

    def _wrap_aio_unary(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        deserializer = _tolerant(handler.request_deserializer)
        if handler.response_streaming:
            streaming: Any = handler.unary_stream
            assert streaming is not None

            async def guarded_stream(request: Any, context: Any) -> AsyncIterator[Any]:
                refused = self.refusal(method, request, self._presented(context))
                if refused is not None:
                    await self._abort_aio(context, refused)
                async for response in streaming(request, context):
                    yield response

            return grpc.unary_stream_rpc_method_handler(
                guarded_stream,
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        unary = handler.unary_unary
        assert unary is not None

        async def guarded(request: Any, context: Any) -> Any:
            refused = self.refusal(method, request, self._presented(context))
            if refused is not None:
                await self._abort_aio(context, refused)
            return await unary(request, context)

        return grpc.unary_unary_rpc_method_handler(
            guarded,
            request_deserializer=deserializer,
            response_serializer=handler.response_serializer,
        )

    def _wrap_aio_streaming(
        self, method: str, handler: grpc.RpcMethodHandler
    ) -> grpc.RpcMethodHandler:
        rule = self._rules.get(method)
        per_message = rule is not None and rule.per_message

        async def checked(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
            async for request in requests:
                if per_message and not isinstance(request, _Undecodable):
                    yield request  # the servicer checks the call it carries
                    continue
                refused = self.refusal(method, request, None)
                if refused is not None:
                    raise refused
                yield request

        if handler.response_streaming:  # the JournalNode's JournalStream
            bidi: Any = handler.stream_stream
            assert bidi is not None

            async def guarded_bidi(requests: AsyncIterator[Any], context: Any) -> Any:
                refused = self.refusal(method, None, self._presented(context))
                if refused is not None:
                    await self._abort_aio(context, refused)
                async for response in bidi(checked(requests), context):
                    yield response

            return grpc.stream_stream_rpc_method_handler(
                guarded_bidi,
                request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        behavior: Any = handler.stream_unary
        assert behavior is not None

        async def guarded(requests: AsyncIterator[Any], context: Any) -> Any:
            refused = self.refusal(method, None, self._presented(context))
            if refused is not None:
                await self._abort_aio(context, refused)
            return await behavior(checked(requests), context)

        return grpc.stream_unary_rpc_method_handler(
            guarded,
            request_deserializer=_tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )
