# tests/test_cuda_engine.cpp. Its GPU tests find a device through libcudart loaded at run time
# (dlopen), so tycho_tests does not link CUDA and runs where no GPU is (they skip there). Its
# CPU-side checks compare the device code's shared formulas (plugins/engines/cuda/cuda_math.hpp, the loss
# pixel, the optimizer elements) with the host loops (the losses' is a header,
# plugins/losses/pixel_loss_loop.hpp; the optimizers' are compiled in here for that).
target_include_directories(tycho_tests PRIVATE ${PROJECT_SOURCE_DIR}/plugins)
set(TYCHO_CUDA_TEST_HOST_SOURCES
  ${PROJECT_SOURCE_DIR}/plugins/optimizers/adam.cpp
  ${PROJECT_SOURCE_DIR}/plugins/optimizers/sgd.cpp)
target_sources(tycho_tests PRIVATE ${TYCHO_CUDA_TEST_HOST_SOURCES})
set_source_files_properties(${TYCHO_CUDA_TEST_HOST_SOURCES} TARGET_DIRECTORY tycho_tests
  PROPERTIES COMPILE_OPTIONS -fopenmp-simd)
target_link_libraries(tycho_tests PRIVATE ${CMAKE_DL_LIBS})
if(TYCHO_ENABLE_CUDA)
  target_compile_definitions(tycho_tests PRIVATE TYCHO_HAVE_CUDA=1
    TYCHO_CUDART_LIBRARY="$<TARGET_FILE:CUDA::cudart>")
endif()
