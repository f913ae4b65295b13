# examples/: programs that use only the public header.  embed_example is
# built against the INSTALLED library with pkg-config and run by
# `make installcheck` (with the demo model, or $NANOLLM_MODEL).
EXTRA_DIST += examples/embed_example.c
CLEANFILES += examples/embed_example

installcheck-local: installcheck-embed-example
installcheck-embed-example:
	@$(MKDIR_P) examples
	PKG_CONFIG_PATH="$(DESTDIR)$(pkgconfigdir)$${PKG_CONFIG_PATH:+:$$PKG_CONFIG_PATH}" \
	PKG_CONFIG_SYSROOT_DIR="$(DESTDIR)" \
	$(CC) $(CFLAGS) -o examples/embed_example $(srcdir)/examples/embed_example.c \
		`PKG_CONFIG_PATH="$(DESTDIR)$(pkgconfigdir)" PKG_CONFIG_SYSROOT_DIR="$(DESTDIR)" $(PKG_CONFIG) --cflags --libs nanollm`
	NANOLLM_WORKER="$(DESTDIR)$(pkglibexecdir)/nanollm-worker" \
	LD_LIBRARY_PATH="$(DESTDIR)$(libdir)$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}" \
	NANOLLM_CPU_KV_BYTES=67108864 ./examples/embed_example
.PHONY: installcheck-embed-example
