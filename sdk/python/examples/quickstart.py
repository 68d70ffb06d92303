from kibotos import Kibotos

k = Kibotos()  # the endpoint and API key `kibotos dev` wrote
ws = k.workspaces.create(memory="512Mi")  # waits until AVAILABLE
try:
    print(ws.exec(["sh", "-c", "echo hello from $(uname -n)"], text=True).stdout, end="")
    ws.files.write("/tmp/greeting.txt", "hi from Python\n")
    print(ws.files.read_text("/tmp/greeting.txt"), end="")
finally:
    ws.delete()
