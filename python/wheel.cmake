# What the Python wheel holds (pyproject.toml at the repository root, built by scikit-build-core
# with wheel.install-dir = "tycho"): libtycho, the `tycho` command and the built-in plugins under
# the package's folder, laid out as an installed prefix,
#   site-packages/tycho/lib/libtycho.so.1
#   site-packages/tycho/lib/tycho/plugins/libtycho_plugin_*.so
#   site-packages/tycho/bin/tycho
# so that libtycho and the command find the plugins beside themselves, as in the build tree
# (registry::default_search_dirs), and nothing needs the checkout or LD_LIBRARY_PATH. Run paths
# are relative to each file ($ORIGIN): a library bundled into lib/ would be found from all three.
# Component python_wheel, EXCLUDE_FROM_ALL: a plain `cmake --install` does not install it.
# Included once by the top-level CMakeLists.txt after every plugin target exists.
get_property(tycho_wheel_plugins GLOBAL PROPERTY TYCHO_PLUGIN_TARGETS)
set_target_properties(tycho_shared PROPERTIES INSTALL_RPATH "$ORIGIN")
set_target_properties(tycho PROPERTIES INSTALL_RPATH "$ORIGIN/../lib")
set_target_properties(${tycho_wheel_plugins} PROPERTIES INSTALL_RPATH "$ORIGIN/../..")
# (The run paths hold for `cmake --install` too, where they point at the prefix's lib/: harmless.)
# libtycho under lib/ ...
install(TARGETS tycho_shared LIBRARY DESTINATION lib NAMELINK_SKIP COMPONENT python_wheel EXCLUDE_FROM_ALL)
# ... then as the one file its SONAME names: a wheel is a zip, which would store the symlink
# libtycho.so.1 -> libtycho.so.<version> as a second copy.
install(CODE "
  set(lib \"\${CMAKE_INSTALL_PREFIX}/lib\")
  file(REMOVE \"\${lib}/$<TARGET_SONAME_FILE_NAME:tycho_shared>\")
  file(RENAME \"\${lib}/$<TARGET_FILE_NAME:tycho_shared>\" \"\${lib}/$<TARGET_SONAME_FILE_NAME:tycho_shared>\")"
  COMPONENT python_wheel EXCLUDE_FROM_ALL)
install(TARGETS tycho RUNTIME DESTINATION bin COMPONENT python_wheel EXCLUDE_FROM_ALL)
install(TARGETS ${tycho_wheel_plugins} LIBRARY DESTINATION lib/tycho/plugins COMPONENT python_wheel EXCLUDE_FROM_ALL)
