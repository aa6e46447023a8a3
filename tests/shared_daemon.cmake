# The tests that share one kcached (tests/integration/daemon_fixture.cpp), read by ctest after the
# tests the integration binary lists (TEST_INCLUDE_FILES in tests/CMakeLists.txt, which writes
# this file into the build folder with the path below filled in).
#
# A test belongs here when it would answer the same on a daemon other tests have used, and used
# at once: it starts no daemon with flags of its own, restarts, stops or kills none, reads no
# counter or entry count (stats), evicts nothing, and asserts a miss or the images under a key
# only for a module of its own (DaemonTest::own_module). A listed test that stops its daemon or
# has flags of its own fails, saying to take it out.
#
# Each is a daemon start and stop less: 0.46 CPU-s, 0.96 under the sanitizers.
set(kcache_shared_daemon_file "@KCACHE_SHARED_DAEMON_FILE@")
set(kcache_shared_daemon_tests
  "^Keys\\."
  "^Host\\.(ObjectsArePositionIndependent|StubPolicyReplaces|GuardKnowsEveryGpuAddressSpace|StubPolicyStubsRocm|DeviceCodeSentAsHost)"
  "^Aot\\.(StubbedHostObject|DevicePartLinks|Property)"
  "^RoundTrip\\.(FetchStreams|LookupReports|ServesHealth|Capabilities|TheDaemonNamesNvJitLink|PtxIsAccepted)"
  "^Cli\\.(CompileWritesOneFile|AnOutputHolding|ExitCodes|OutputFileNeeds|ServerComesFromTheEnvironment|FileSystemErrors|HostCompileWithStubs|CompileLinksSeveral|AThousandUndefined)"
  "^CApi\\.FromC$"
  "^DriverAware\\.(AnOlderDriver|ADriverThatTakes|CubinsADriver|ClangBitcode|FetchReturnsOnly|BundlesArePrecompiled|TheCliTakesDriver)"
  "^Amd\\.(MatchesTheReference|ImagesAreChosen|BadInputsAreRefused|AnOlderRuntime|TheCliWrites)"
  "^Source\\.(OneChangedHeader|AMissingHeader|TheCliCompilesKeys)"
  "^HttpApi\\.(ExplainsEachBadRequest|ClientFetchOverHttp)"
  "^Bundles\\.(AFailedModule|ManifestsAreChecked)"
  "^LargeReplies\\.CompileImagesPastTheInlineBudget"
  "^FetchOrCompile\\.AnUnreachableDaemon")

set(kcache_shared_daemon_env "KCACHE_SHARED_DAEMON=${kcache_shared_daemon_file}")
list(FIND kcache_integration_tests_TESTS SharedDaemon.Start start_listed)
if(start_listed GREATER -1)
  # Start runs first: a fresh build folder runs its tests by COST (tests/slow_tests.cmake).
  set_tests_properties(SharedDaemon.Start PROPERTIES FIXTURES_SETUP kcache_shared_daemon COST 1000
                       ENVIRONMENT "${kcache_shared_daemon_env}")
  set_tests_properties(SharedDaemon.Stop PROPERTIES FIXTURES_CLEANUP kcache_shared_daemon
                       ENVIRONMENT "${kcache_shared_daemon_env}")
  foreach(test IN LISTS kcache_integration_tests_TESTS)
    foreach(pattern IN LISTS kcache_shared_daemon_tests)
      if(test MATCHES "${pattern}")
        set_tests_properties("${test}" PROPERTIES FIXTURES_REQUIRED kcache_shared_daemon
                             ENVIRONMENT "${kcache_shared_daemon_env}")
        break()
      endif()
    endforeach()
  endforeach()
endif()
