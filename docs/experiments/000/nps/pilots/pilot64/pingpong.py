# Pilot 64: ping-pong over a loopback TCP socket between two processes pinned to cores 0 and 1,
# with gaps: is the cost of a wake-up after a gap the VM's or slipstream's?
import os, socket, time, statistics as st, sys
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1); port = srv.getsockname()[1]
if os.fork() == 0:
    os.sched_setaffinity(0, {0})
    c, _ = srv.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        d = c.recv(64)
        if not d: os._exit(0)
        c.sendall(b"x" * 8000)
os.sched_setaffinity(0, {int(sys.argv[1])})
s = socket.create_connection(("127.0.0.1", port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
def one():
    t = time.perf_counter(); s.sendall(b"q"); n = 0
    while n < 8000: n += len(s.recv(65536))
    return (time.perf_counter() - t) * 1e6
for _ in range(50): one()
for gap in [0, 0.001, 0.005, 0.02, 0.1]:
    xs = []
    for _ in range(40):
        if gap: time.sleep(gap)
        xs.append(one())
    print(f"gap {gap*1000:5.0f} ms: median {st.median(xs):6.0f} us")
s.close()
