"""The gRPC upstream of the tests: a Payments service that notes every call it runs.

Usage: server.py GENERATED_DIR LOG_FILE [CERT KEY]
Prints the port it listens on (PORT from the environment, else any free one), then serves
until killed. Each call it runs appends one line,
"<method> <idempotency-key>", to LOG_FILE before answering. Request metadata steers the answer:
  x-answer-status: N   end the call with status N (and grpc-status-details-bin "details-N")
  x-delay-ms: N        wait N milliseconds before answering
"""
import os
import sys
import threading
import time
from concurrent import futures

sys.path.insert(0, sys.argv[1])
import grpc  # noqa: E402
import payments_pb2  # noqa: E402
import payments_pb2_grpc  # noqa: E402

LOG = sys.argv[2]
PORT = os.environ.get("PORT", "0")
LOCK = threading.Lock()
EXECUTIONS = [0]


def note(method, context):
    meta = dict(context.invocation_metadata())
    with LOCK:
        EXECUTIONS[0] += 1
        with open(LOG, "a") as log:
            log.write(f"{method} {meta.get('idempotency-key', '-')}\n")
        return EXECUTIONS[0], meta


def steer(meta, context):
    delay = int(meta.get("x-delay-ms", "0"))
    if delay:
        time.sleep(delay / 1000)
    status = meta.get("x-answer-status")
    if status is not None:
        code = next(c for c in grpc.StatusCode if c.value[0] == int(status))
        context.set_trailing_metadata(
            (("grpc-status-details-bin", f"details-{status}".encode()), ("x-trailer", "kept"))
        )
        context.abort(code, f"asked for status {status}")


class Payments(payments_pb2_grpc.PaymentsServicer):
    def CreatePayment(self, request, context):
        execution, meta = note("CreatePayment", context)
        # Steered first: an abort before any metadata is sent is a trailers-only answer.
        steer(meta, context)
        context.send_initial_metadata((("x-upstream", "payments"),))
        context.set_trailing_metadata((("x-trailer", "kept"),))
        return payments_pb2.Payment(
            id=f"pay_{execution}",
            account=request.account,
            amount=request.amount,
            execution=execution,
        )

    def ListPayments(self, request, context):
        execution, meta = note("ListPayments", context)
        steer(meta, context)
        for i in range(request.count):
            yield payments_pb2.Payment(id=f"pay_{execution}_{i}", execution=execution)


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    payments_pb2_grpc.add_PaymentsServicer_to_server(Payments(), server)
    if len(sys.argv) > 4:
        with open(sys.argv[3], "rb") as c, open(sys.argv[4], "rb") as k:
            creds = grpc.ssl_server_credentials([(k.read(), c.read())])
        port = server.add_secure_port(f"127.0.0.1:{PORT}", creds)
    else:
        port = server.add_insecure_port(f"127.0.0.1:{PORT}")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
