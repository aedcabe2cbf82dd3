# A fixed beanstalk workload: N put -> reserve -> delete cycles in one tube.
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
f = s.makefile("rb")
def cmd(line, body=None):
    data = line.encode() + b"\r\n"
    if body is not None:
        data += body + b"\r\n"
    s.sendall(data)
    r = f.readline()
    if r.startswith(b"RESERVED"):
        size = int(r.split()[2]); f.read(size + 2)
    return r
cmd("use bench"); cmd("watch bench"); cmd("ignore default")
for i in range(n):
    r = cmd("put 1024 0 60 5", b"hello")
    r = cmd("reserve")
    jid = r.split()[1].decode()
    r = cmd("delete " + jid)
    assert r.startswith(b"DELETED"), r
print("done", n)
