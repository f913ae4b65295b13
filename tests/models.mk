# Model files: config.json, safetensors, model families, the tensor list and mkmodel.
if HAVE_CHECK
check_PROGRAMS += tests/test_model_config tests/test_safetensors tests/test_model_family \
	tests/test_mkmodel
TESTS += tests/test_model_config tests/test_safetensors tests/test_model_family tests/test_mkmodel

tests_test_model_config_SOURCES = tests/test_model_config.c
tests_test_model_config_CFLAGS = $(TEST_CFLAGS)
tests_test_model_config_LDADD = libnlcommon.la $(JANSSON_LIBS) $(TEST_LIBS)

tests_test_safetensors_SOURCES = tests/test_safetensors.c
tests_test_safetensors_CFLAGS = $(TEST_CFLAGS)
tests_test_safetensors_LDADD = libnlcommon.la $(JANSSON_LIBS) $(TEST_LIBS)

tests_test_model_family_SOURCES = tests/test_model_family.c
tests_test_model_family_CFLAGS = $(TEST_CFLAGS)
tests_test_model_family_LDADD = libnlcommon.la $(JANSSON_LIBS) $(TEST_LIBS)

tests_test_mkmodel_SOURCES = tests/test_mkmodel.c
tests_test_mkmodel_CFLAGS = $(TEST_CFLAGS)
tests_test_mkmodel_LDADD = libnlcli.la libnlleader.la $(JANSSON_LIBS) $(TEST_LIBS)
endif
