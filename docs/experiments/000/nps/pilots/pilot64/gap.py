# Pilot 64: a keep-alive client, one request at a time, after gaps of 0-100 ms (usage: gap.py HOST PORT).
import http.client, time, sys, statistics as st
host, port = sys.argv[1], int(sys.argv[2])
c = http.client.HTTPConnection(host, port)
def one():
    t = time.perf_counter(); c.request("GET", "/f000.html", headers={"slipstream-probe": "1"}); r = c.getresponse(); r.read(); return (time.perf_counter() - t) * 1e6
for _ in range(20): one()
for gap in [0, 0.001, 0.005, 0.02, 0.1]:
    xs = []
    for _ in range(40):
        if gap: time.sleep(gap)
        xs.append(one())
    print(f"gap {gap*1000:5.0f} ms: median {st.median(xs):6.0f} us  p25 {sorted(xs)[10]:6.0f}")
