# What `cmake --install` puts where, and the Debian package of it (`cpack -G DEB` in the build
# folder: kcache_VERSION_amd64.deb). deploy/package/README.md says what it holds and how CI
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

set(CPACK_PACKAGE_NAME kcache)
set(CPACK_PACKAGE_VENDOR "kcache")
set(CPACK_PACKAGE_CONTACT "kcache maintainers <kcache@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "compile cache daemon for GPU kernels")
set(CPACK_PACKAGE_DESCRIPTION "kcached compiles LLVM IR, PTX and CUDA C++ to PTX, cubin and AMD code objects
and keeps every result in RocksDB under a content-hash key; build farms share one daemon or a
fleet shares one cache through Redis. The package holds kcached, the kcache CLI, kcache-grpc,
libkcache (the C API) with its header and pkg-config file, the Python module, the systemd unit
and its configuration.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # kcache_VERSION_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
# Depends from the Debian libraries the binaries link (dpkg-shlibdeps); the rest by hand: the
# Python module runs on python3, kcached links AMD code objects with ld.lld where it is found, and
# runs the tools of build steps in bubblewrap's jail (without it, it refuses build steps).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "bubblewrap")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "lld-22, rocm-device-libs, redis-server")
# /etc/kcache/kcached.toml is a conffile. (CPack's own postinst runs ldconfig for libkcache.so.)
file(WRITE ${PROJECT_BINARY_DIR}/package/conffiles "/etc/kcache/kcached.toml\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_BINARY_DIR}/package/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
