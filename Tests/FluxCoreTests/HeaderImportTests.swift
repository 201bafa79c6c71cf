import CFlux
import Testing

/// include/flux.h imported as a plain Clang module, as any Swift host does:
/// every integer constant must be visible (the importer skips computed and
/// function-like macros), so a Swift program can follow the header's advice
/// to compare flux_version() with FLUX_VERSION_NUMBER.
@Suite struct HeaderImportTests {
    @Test func theIntegerConstantsAreVisibleAndAgree() {
        #expect(FLUX_VERSION_NUMBER == FLUX_VERSION_MAJOR * 10000 + FLUX_VERSION_MINOR * 100 + FLUX_VERSION_PATCH)
        #expect(FLUX_OBSERVER_VERSION == 1)
        #expect(FLUX_SIGNATURE_MAX_ARGS > 0 && FLUX_CLOSURE_RET_SIZE == 8)
    }
}
