// The one translation unit that compiles Beast (BOOST_BEAST_SEPARATE_COMPILATION).
#include <utility>

#include <boost/beast/src.hpp>
