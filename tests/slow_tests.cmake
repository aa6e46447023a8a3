# The tests that take longest, given a COST so that `ctest -j` starts them first. Read by ctest
# after the tests the two test binaries list (TEST_INCLUDE_FILES in tests/CMakeLists.txt).
#
# Without a COST, ctest runs a fresh build folder's tests in the order they were added. The
# launcher's project builds, the corpora's parity tests and the package test then started among
# the last 90 of 407, and ran on alone while the other core idled (a clean clone's normal pass:
# 415 s for 748 s of test time on two cores). Once a build folder has run its tests, ctest orders
# them by what it measured (Testing/Temporary/CTestCostData.txt) and these numbers no longer
# matter. They are seconds on a two-core machine, from deploy/build-profile.sh's slowest tests;
# a test matched by no pattern here keeps cost 0 and runs in its order.
set(kcache_slow_tests
  "^Launcher\\.ACmakeBuild" 115
  "^Launcher\\.AClangBuild" 72
  "^LauncherCorpus\\.RealCommandLines" 90
  "^LauncherCorpus\\.ClangCommandLines" 36
  "^LauncherCorpus\\.AMultiTarget" 32
  "^(Corpus|Hip)Parity\\.KcacheAccepts" 35
  "^Launcher\\.Odd" 20
  "^Fleet\\.FourHuge" 14
  "^(FleetOnACluster|RedisCluster|RedisClusterWithoutFullCoverage)\\." 9
  "^(Bundles\\.Precompile|Amd\\.EveryModule|Aot\\.Property|Source\\.(Templates|TheCli|OneChanged)|Streaming\\.|LargeReplies\\.)" 9
  "^(CrashSafety|DescriptorLimit|Isolation|MixedLoad|Load)\\." 6)
foreach(test IN LISTS kcache_integration_tests_TESTS kcache_unit_tests_TESTS)
  set(pairs ${kcache_slow_tests})
  while(pairs)
    list(POP_FRONT pairs pattern cost)
    if(test MATCHES "${pattern}")
      set_tests_properties("${test}" PROPERTIES COST ${cost})
      break()
    endif()
  endwhile()
endforeach()
