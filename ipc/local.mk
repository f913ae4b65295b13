# ipc/: shared-memory segment, command and reply rings, wire format.
noinst_LTLIBRARIES += libnlipc.la
libnlipc_la_SOURCES = \
	ipc/wire.h ipc/wire.c \
	ipc/ring.h ipc/ring.c \
	ipc/shm.h ipc/shm.c
