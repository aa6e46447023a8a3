# What `cmake --install` puts where, and the Debian package of it (`cpack -G DEB` in the build
# folder: kcache_VERSION_amd64.deb). deploy/README.md says what it holds and how CI
# installs it into a fresh root (tests/deploy/check_package.sh, ctest deploy.package).
include(GNUInstallDirs)

install(TARGETS kcached kcache kcache-grpc RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS kcache_c LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/client/include/kcache/kcache.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kcache)
# The .pc file names the prefix of the install that writes it (cpack installs with /usr).
install(CODE "
  set(prefix \"\${CMAKE_INSTALL_PREFIX}\")
  set(libdir ${CMAKE_INSTALL_LIBDIR})
  set(includedir ${CMAKE_INSTALL_INCLUDEDIR})
  set(version ${PROJECT_VERSION})
  configure_file(\"${PROJECT_SOURCE_DIR}/deploy/package/kcache.pc.in\" \"${PROJECT_BINARY_DIR}/package/kcache.pc\" @ONLY)")
install(FILES ${PROJECT_BINARY_DIR}/package/kcache.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
# Debian's python3 reads /usr/lib/python3/dist-packages; kcache.py finds libkcache.so on the
# library search path.
install(FILES ${PROJECT_SOURCE_DIR}/client/python/kcache.py DESTINATION lib/python3/dist-packages)
# ... and for any other python3 or a virtual environment, through a .pth file naming this folder
# (docs/client-api.md).
install(FILES ${PROJECT_SOURCE_DIR}/client/python/kcache.py DESTINATION ${CMAKE_INSTALL_DATADIR}/kcache/python)

# The systemd unit, with ExecStart where this install puts kcached (the file in deploy/ names
# /usr/local/bin, for a copy installed by hand; cpack installs with the prefix /usr), its fleet
# drop-in as an example, and the configuration the unit reads, in /etc whatever the prefix (a
# conffile: an upgrade keeps a changed one).
install(CODE "
  file(READ \"${PROJECT_SOURCE_DIR}/deploy/systemd/kcached.service\" unit)
  string(REPLACE /usr/local/bin/kcached \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/kcached\" unit \"\${unit}\")
  file(WRITE \"${PROJECT_BINARY_DIR}/package/kcached.service\" \"\${unit}\")")
install(FILES ${PROJECT_BINARY_DIR}/package/kcached.service DESTINATION lib/systemd/system)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/kcached.toml DESTINATION /etc/kcache)
# The fleet drop-in's ExecStart likewise names the kcached this install puts in place.
install(CODE "
  file(READ \"${PROJECT_SOURCE_DIR}/deploy/systemd/kcached.service.d/fleet.conf\" dropin)
  string(REPLACE /usr/local/bin/kcached \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/kcached\" dropin \"\${dropin}\")
  file(WRITE \"${PROJECT_BINARY_DIR}/package/fleet.conf\" \"\${dropin}\")")
install(FILES ${PROJECT_SOURCE_DIR}/deploy/kcached.example.toml ${PROJECT_BINARY_DIR}/package/fleet.conf
              ${PROJECT_SOURCE_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})

# Debian's files of the package: its copyright, its changelog (gzip -9n, as policy has it), a man
# page for each program (help2man, from its --help and --version), and lintian's overrides,
# each justified in the file.
install(FILES ${PROJECT_SOURCE_DIR}/deploy/package/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${PROJECT_SOURCE_DIR}/deploy/package/lintian-overrides DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides
        RENAME kcache)
install(CODE "
  execute_process(COMMAND gzip -9n -c \"${PROJECT_SOURCE_DIR}/deploy/package/changelog\"
                  OUTPUT_FILE \"${PROJECT_BINARY_DIR}/package/changelog.gz\")
  find_program(help2man help2man)
  if(NOT help2man)
    message(WARNING \"help2man is absent (deploy/install-deps.sh installs it): no man pages\")
  endif()
  foreach(page \"kcached;8;the kcache compile cache daemon;$<TARGET_FILE:kcached>\"
               \"kcache;1;client of the kcached GPU compile cache and compiler launcher;$<TARGET_FILE:kcache-grpc>\"
               \"kcache-grpc;1;the kcache CLI over gRPC (kcache hands its commands to it);$<TARGET_FILE:kcache-grpc>\")
    list(GET page 0 name)
    list(GET page 1 section)
    list(GET page 2 what)
    list(GET page 3 program)
    if(help2man)
      execute_process(COMMAND \"\${help2man}\" --no-info --section=\${section} --name=\${what} \"\${program}\"
                      OUTPUT_VARIABLE text RESULT_VARIABLE failed)
      if(NOT failed)
        string(REPLACE \"kcache-grpc\" \"\${name}\" text \"\${text}\")
        file(WRITE \"${PROJECT_BINARY_DIR}/package/\${name}.\${section}\" \"\${text}\")
        execute_process(COMMAND gzip -9nf \"${PROJECT_BINARY_DIR}/package/\${name}.\${section}\")
        file(INSTALL \"${PROJECT_BINARY_DIR}/package/\${name}.\${section}.gz\"
             DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_MANDIR}/man\${section}\")
      endif()
    endif()
  endforeach()")
install(FILES ${PROJECT_BINARY_DIR}/package/changelog.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})
# The docs, and the README's first compile's module as an example.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs FILES_MATCHING PATTERN "*.md")
install(FILES ${PROJECT_SOURCE_DIR}/tests/data/kernels/saxpy.ll DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

set(CPACK_PACKAGE_NAME kcache)
set(CPACK_PACKAGE_VENDOR "kcache")
set(CPACK_PACKAGE_CONTACT "kcache maintainers <maintainers@kcache.dev>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "compile cache daemon for GPU kernels")
set(CPACK_PACKAGE_DESCRIPTION "kcached compiles LLVM IR, PTX and CUDA C++ to PTX, cubin and AMD
code objects and keeps every result in RocksDB under a content-hash key;
build farms share one daemon, or a fleet shares one cache through Redis.
The package holds kcached, the kcache CLI and compiler launcher,
kcache-grpc, libkcache (the C API) with its header and pkg-config file,
the Python module, the systemd unit and its configuration.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # kcache_VERSION_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
# Depends from the Debian libraries the binaries link (dpkg-shlibdeps); the rest by hand: the
# Python module runs on python3, kcached links AMD code objects with ld.lld where it is found, and
# runs the tools of build steps in bubblewrap's jail (without it, it refuses build steps).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The shlibs file for libkcache.so.0, which packages linking it would read.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_PACKAGE_DEPENDS "bubblewrap")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "lld-22, rocm-device-libs, redis-server")
# /etc/kcache/kcached.toml is a conffile. The maintainer scripts handle kcached.service as
# dh_installsystemd would, and a purge removes its enable and /etc/kcache
# (deploy/package/postrm); libkcache.so.0's ldconfig is a trigger.
file(WRITE ${PROJECT_BINARY_DIR}/package/conffiles "/etc/kcache/kcached.toml\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_BINARY_DIR}/package/conffiles ${PROJECT_SOURCE_DIR}/deploy/package/postinst
    ${PROJECT_SOURCE_DIR}/deploy/package/prerm ${PROJECT_SOURCE_DIR}/deploy/package/postrm
    ${PROJECT_SOURCE_DIR}/deploy/package/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
