-- The requests of one wrk run, chosen by BENCH_MODE:
--   plain   POST without a key (not deduplicated: forwarded as it is)
--   keyed   POST with a fresh Idempotency-Key on every request (a first request each time)
--   replay  POST cycling over BENCH_REPLAY_KEYS keys primed beforehand (a replay each time)
-- BENCH_BODY, if set, is the body of every request (the sizing script's).
-- Keys are "<BENCH_KEY_PREFIX>-<thread>-<n>" (keyed) or "<BENCH_KEY_PREFIX>-r<i>" (replay).
-- done() prints one parseable line: "BENCH requests=... duration_us=... p50_us=... ...".

local mode = os.getenv("BENCH_MODE") or "plain"
local prefix = os.getenv("BENCH_KEY_PREFIX") or "bench"
local replay_keys = tonumber(os.getenv("BENCH_REPLAY_KEYS") or "16")

wrk.method = "POST"
wrk.path = "/v1/charges"
wrk.body = os.getenv("BENCH_BODY") or '{"amount":100,"currency":"eur","customer":"cus_1"}'
wrk.headers["Content-Type"] = "application/json"

local threads = {}
local thread_count = 0

function setup(thread)
    thread_count = thread_count + 1
    thread:set("thread_id", thread_count)
    table.insert(threads, thread)
end

local counter = 0

function request()
    counter = counter + 1
    if mode == "keyed" then
        return wrk.format(nil, nil, {
            ["Idempotency-Key"] = prefix .. "-" .. thread_id .. "-" .. counter,
        })
    elseif mode == "replay" then
        local i = (counter + thread_id) % replay_keys
        return wrk.format(nil, nil, { ["Idempotency-Key"] = prefix .. "-r" .. i })
    end
    return wrk.format()
end

function done(summary, latency, requests)
    local e = summary.errors
    io.write(string.format(
        "BENCH requests=%d duration_us=%d p50_us=%d p99_us=%d max_us=%d "
            .. "err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d\n",
        summary.requests, summary.duration,
        latency:percentile(50), latency:percentile(99), latency.max,
        e.connect, e.read, e.write, e.status, e.timeout))
end
