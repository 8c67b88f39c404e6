"""The gRPC client of the tests: runs the calls a JSON plan names and prints what came back.

Usage: client.py GENERATED_DIR PLAN_JSON
The plan: {"target": "HOST:PORT", "calls": [CALL, ...]}, each CALL one of
  {"kind": "create", "key": K, "account": A, "amount": N, "metadata": {...}, "timeout": S}
  {"kind": "list", "key": K, "count": N}
  {"kind": "pair", "first": CALL, "second": CALL, "log": FILE, "started": LINE}
    (the first call, then the second once LINE is in the upstream's FILE: the first is running)
All calls go over one channel, so one HTTP/2 connection. Prints one JSON list, one result per
call (a pair gives two): status code, details, initial and trailing metadata, the messages.
"""
import json
import sys
import time

sys.path.insert(0, sys.argv[1])
import grpc  # noqa: E402
import payments_pb2  # noqa: E402
import payments_pb2_grpc  # noqa: E402


def metadata(pairs):
    out = []
    for key, value in pairs or ():
        out.append([key, "bin:" + value.hex() if isinstance(value, bytes) else value])
    return out


def outcome(code, details, initial, trailing, messages):
    return {
        "code": code.name,
        "details": details or "",
        "initial": metadata(initial),
        "trailing": metadata(trailing),
        "messages": [m.SerializeToString().hex() for m in messages],
    }


def request_metadata(call):
    meta = [(k, v) for k, v in call.get("metadata", {}).items()]
    if call.get("key") is not None:
        meta.append(("idempotency-key", call["key"]))
    return meta


def create(stub, call):
    request = payments_pb2.CreatePaymentRequest(
        account=call.get("account", "acct_1"), amount=call.get("amount", 100)
    )
    return stub.CreatePayment.future(
        request, metadata=request_metadata(call), timeout=call.get("timeout")
    )


def finish_create(future):
    try:
        response = future.result()
        messages = [response]
    except grpc.RpcError:
        messages = []
    return outcome(
        future.code(),
        future.details(),
        future.initial_metadata(),
        future.trailing_metadata(),
        messages,
    )


def list_payments(stub, call):
    request = payments_pb2.ListPaymentsRequest(count=call.get("count", 3))
    stream = stub.ListPayments(request, metadata=request_metadata(call))
    messages = []
    try:
        for message in stream:
            messages.append(message)
    except grpc.RpcError:
        pass
    return outcome(
        stream.code(),
        stream.details(),
        stream.initial_metadata(),
        stream.trailing_metadata(),
        messages,
    )


def wait_for_line(path, line, limit=10.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            with open(path) as log:
                if line in log.read().splitlines():
                    return
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    raise SystemExit(f"the upstream never ran {line!r}")


def run(stub, call):
    if call["kind"] == "create":
        return [finish_create(create(stub, call))]
    if call["kind"] == "list":
        return [list_payments(stub, call)]
    first = create(stub, call["first"])
    wait_for_line(call["log"], call["started"])
    second = finish_create(create(stub, call["second"]))
    return [finish_create(first), second]


def main():
    plan = json.loads(sys.argv[2])
    if plan.get("ca"):
        with open(plan["ca"], "rb") as ca:
            creds = grpc.ssl_channel_credentials(ca.read())
        channel = grpc.secure_channel(plan["target"], creds)
    else:
        channel = grpc.insecure_channel(plan["target"])
    stub = payments_pb2_grpc.PaymentsStub(channel)
    results = []
    for call in plan["calls"]:
        results.extend(run(stub, call))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
